//! rlimit names ("RLIMIT_MEMLOCK") to resources, and setrlimit with errors
//! that say what was asked, what is in force, and why it failed.

use nix::errno::Errno;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

#[derive(Debug, thiserror::Error)]
pub enum RlimitError {
    #[error("unknown rlimit {0:?}")]
    Unknown(String),
    /// The message names the limit, the values asked and in force, and the errno.
    #[error("{message}")]
    Set { message: String, errno: Errno },
}

pub fn resource(name: &str) -> Result<Resource, RlimitError> {
    Ok(match name {
        "RLIMIT_AS" => Resource::RLIMIT_AS,
        "RLIMIT_CORE" => Resource::RLIMIT_CORE,
        "RLIMIT_CPU" => Resource::RLIMIT_CPU,
        "RLIMIT_DATA" => Resource::RLIMIT_DATA,
        "RLIMIT_FSIZE" => Resource::RLIMIT_FSIZE,
        "RLIMIT_LOCKS" => Resource::RLIMIT_LOCKS,
        "RLIMIT_MEMLOCK" => Resource::RLIMIT_MEMLOCK,
        "RLIMIT_MSGQUEUE" => Resource::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => Resource::RLIMIT_NICE,
        "RLIMIT_NOFILE" => Resource::RLIMIT_NOFILE,
        "RLIMIT_NPROC" => Resource::RLIMIT_NPROC,
        "RLIMIT_RSS" => Resource::RLIMIT_RSS,
        "RLIMIT_RTPRIO" => Resource::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => Resource::RLIMIT_RTTIME,
        "RLIMIT_SIGPENDING" => Resource::RLIMIT_SIGPENDING,
        "RLIMIT_STACK" => Resource::RLIMIT_STACK,
        other => return Err(RlimitError::Unknown(other.to_string())),
    })
}

fn show(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// Sets one limit by name.
pub fn set(name: &str, soft: u64, hard: u64) -> Result<(), RlimitError> {
    let res = resource(name)?;
    setrlimit(res, soft, hard).map_err(|errno| {
        let (cs, ch) = getrlimit(res).unwrap_or((0, 0));
        let hint = if errno == Errno::EPERM && hard > ch {
            " (raising a hard limit needs CAP_SYS_RESOURCE in the initial user namespace; for RLIMIT_MEMLOCK set LimitMEMLOCK=infinity for containerd.service)"
        } else {
            ""
        };
        let message = format!(
            "setrlimit {name} soft={} hard={} (in force: soft={} hard={}): {errno}{hint}",
            show(soft),
            show(hard),
            show(cs),
            show(ch)
        );
        RlimitError::Set { message, errno }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_resources() {
        assert_eq!(
            resource("RLIMIT_MEMLOCK").unwrap(),
            Resource::RLIMIT_MEMLOCK
        );
        assert_eq!(resource("RLIMIT_NOFILE").unwrap(), Resource::RLIMIT_NOFILE);
        assert!(matches!(
            resource("RLIMIT_BOGUS"),
            Err(RlimitError::Unknown(_))
        ));
        assert!(resource("memlock").is_err());
    }

    #[test]
    fn raise_beyond_hard_names_limit_values_and_errno() {
        // Run in a child so the test process keeps its limits.
        // SAFETY: the child only calls async-signal-safe-enough code and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
                let ok = setrlimit(Resource::RLIMIT_NOFILE, hard.min(1024), hard.min(1024)).is_ok()
                    && nix::unistd::setresuid(1.into(), 1.into(), 1.into()).is_ok();
                let err = set("RLIMIT_NOFILE", 4096, 4096)
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                let good = ok
                    && err.contains("RLIMIT_NOFILE")
                    && err.contains("hard=4096")
                    && err.contains("EPERM")
                    && err.contains("CAP_SYS_RESOURCE");
                // SAFETY: _exit ends the forked child without running the parent's destructors.
                unsafe { libc::_exit(if good { 0 } else { 1 }) };
            }
            nix::unistd::ForkResult::Parent { child } => {
                if !nix::unistd::geteuid().is_root() {
                    let _ = nix::sys::wait::waitpid(child, None);
                    rund_skip::skip!("needs root to drop to uid 1");
                }
                let st = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
