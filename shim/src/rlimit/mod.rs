//! Rlimits are raised from outside, by the shim, with prlimit(2): a process
//! inside a user namespace can only lower them (DESIGN.md, "user namespaces").

pub mod memlock;

use nix::errno::Errno;
use oci_spec::runtime::PosixRlimit;
use rund_sys::rlimit::{self, show, Resource};

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

/// The resource an OCI rlimit name stands for.
pub fn resource(kind: &str) -> Result<Resource, RlimitError> {
    rlimit::resource(kind).ok_or_else(|| RlimitError::Unknown(kind.to_string()))
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
    rlimit::prlimit(pid, resource(kind)?, None).map_err(|e| sys_err(kind, pid, e))
}

fn sys_err(kind: &str, pid: i32, errno: Errno) -> RlimitError {
    RlimitError::Sys {
        kind: kind.into(),
        pid,
        source: errno.into(),
    }
}

/// Sets one limit on `pid` exactly; a refused raise names the cause and fix.
pub fn set(pid: i32, kind: &str, soft: u64, hard: u64) -> Result<(), RlimitError> {
    let res = resource(kind)?;
    match rlimit::prlimit(pid, res, Some((soft, hard))) {
        Ok(_) => Ok(()),
        Err(Errno::EPERM) => {
            let current_hard = get(pid, kind).map_or_else(|_| "unknown".into(), |(_, h)| show(h));
            Err(RlimitError::CannotRaise {
                kind: kind.into(),
                wanted: show(hard),
                soft: show(soft),
                current_hard,
            })
        }
        Err(e) => Err(sys_err(kind, pid, e)),
    }
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
        let e = resource("RLIMIT_BOGUS").unwrap_err();
        assert!(e.to_string().contains("RLIMIT_BOGUS"), "{e}");
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
