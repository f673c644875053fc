//! Rlimits are raised from outside, by the shim, with prlimit(2): a process
//! inside a user namespace can only lower them (DESIGN.md, "user namespaces").

pub mod memlock;

use oci_spec::runtime::PosixRlimit;

#[derive(Debug, thiserror::Error)]
pub enum RlimitError {
    #[error("{0}")]
    BadValue(String),
    #[error("unknown rlimit type {0}")]
    Unknown(String),
    #[error("rlimit {kind}: soft limit {soft} is above hard limit {hard}")]
    SoftAboveHard { kind: String, soft: u64, hard: u64 },
    #[error(
        "cannot raise {kind} to {wanted} (soft {soft}): the hard limit in force is {current_hard} \
         and this process lacks CAP_SYS_RESOURCE to raise it. Fix: start containerd with a higher \
         limit (systemd: LimitMEMLOCK=infinity / Limit<NAME>= in containerd.service), or request \
         at most {current_hard}"
    )]
    CannotRaise {
        kind: String,
        wanted: String,
        soft: String,
        current_hard: String,
    },
    #[error("prlimit {kind} on pid {pid}: {source}")]
    Sys {
        kind: String,
        pid: i32,
        source: std::io::Error,
    },
}

/// Maps an OCI rlimit name to its resource number.
pub fn resource(kind: &str) -> Result<libc::__rlimit_resource_t, RlimitError> {
    Ok(match kind {
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        other => return Err(RlimitError::Unknown(other.to_string())),
    })
}

fn fmt_limit(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// Checks names and soft <= hard, without touching any process.
pub fn validate(limits: &[PosixRlimit]) -> Result<(), RlimitError> {
    for l in limits {
        let kind = l.typ().to_string();
        resource(&kind)?;
        if l.soft() > l.hard() {
            return Err(RlimitError::SoftAboveHard {
                kind,
                soft: l.soft(),
                hard: l.hard(),
            });
        }
    }
    Ok(())
}

/// Current (soft, hard) of `kind` for `pid` (0 = this process).
pub fn get(pid: i32, kind: &str) -> Result<(u64, u64), RlimitError> {
    let res = resource(kind)?;
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit with a null new limit only writes the old limit into `old`.
    let rc = unsafe { libc::prlimit(pid, res, std::ptr::null(), &mut old) };
    if rc != 0 {
        return Err(RlimitError::Sys {
            kind: kind.into(),
            pid,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok((old.rlim_cur, old.rlim_max))
}

/// Sets one limit on `pid` exactly; a refused raise names the cause and fix.
pub fn set(pid: i32, kind: &str, soft: u64, hard: u64) -> Result<(), RlimitError> {
    let res = resource(kind)?;
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads `new` and writes `old`, both valid for the call.
    let rc = unsafe { libc::prlimit(pid, res, &new, &mut old) };
    if rc == 0 {
        return Ok(());
    }
    let source = std::io::Error::last_os_error();
    if source.raw_os_error() == Some(libc::EPERM) {
        let (_, current_hard) = get(pid, kind).unwrap_or((0, old.rlim_max));
        return Err(RlimitError::CannotRaise {
            kind: kind.into(),
            wanted: fmt_limit(hard),
            soft: fmt_limit(soft),
            current_hard: fmt_limit(current_hard),
        });
    }
    Err(RlimitError::Sys {
        kind: kind.into(),
        pid,
        source,
    })
}

/// Applies every limit of the spec to `pid`.
pub fn apply(pid: i32, limits: &[PosixRlimit]) -> Result<(), RlimitError> {
    validate(limits)?;
    for l in limits {
        set(pid, &l.typ().to_string(), l.soft(), l.hard())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_and_unknown_is_refused() {
        assert_eq!(resource("RLIMIT_NOFILE").unwrap(), libc::RLIMIT_NOFILE);
        assert!(resource("RLIMIT_BOGUS").is_err());
    }

    #[test]
    fn lowering_works_and_raising_past_hard_explains_itself() {
        // Work on a child so this test process keeps its limits.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let (_, hard) = get(pid, "RLIMIT_MEMLOCK").unwrap();
        set(pid, "RLIMIT_MEMLOCK", 4096, 4096).unwrap();
        assert_eq!(get(pid, "RLIMIT_MEMLOCK").unwrap(), (4096, 4096));
        match set(pid, "RLIMIT_MEMLOCK", hard, hard) {
            Ok(()) => eprintln!("note: this process can raise hard limits (CAP_SYS_RESOURCE)"),
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("CAP_SYS_RESOURCE") && m.contains("LimitMEMLOCK=infinity"),
                    "{m}"
                );
                assert!(m.contains("4096"), "names the hard limit in force: {m}");
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
