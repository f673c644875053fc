//! setrlimit by OCI name ("RLIMIT_MEMLOCK"), with errors
//! that say what was asked, what is in force, and why it failed.

use nix::errno::Errno;
use rund_sys::rlimit::{prlimit, resource, show};

#[derive(Debug, thiserror::Error)]
pub enum RlimitError {
    #[error("unknown rlimit {0:?}")]
    Unknown(String),
    /// The message names the limit, the values asked and in force, and the errno.
    #[error("{message}")]
    Set { message: String, errno: Errno },
}

/// Sets one limit of this process by name.
pub fn set(name: &str, soft: u64, hard: u64) -> Result<(), RlimitError> {
    let res = resource(name).ok_or_else(|| RlimitError::Unknown(name.to_string()))?;
    prlimit(0, res, Some((soft, hard))).map(drop).map_err(|errno| {
        let (cs, ch) = prlimit(0, res, None).unwrap_or((0, 0));
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
    fn unknown_names_are_refused_by_name() {
        let e = set("RLIMIT_BOGUS", 1, 1).unwrap_err();
        assert!(matches!(e, RlimitError::Unknown(_)));
        assert!(e.to_string().contains("RLIMIT_BOGUS"), "{e}");
    }

    #[test]
    fn raise_beyond_hard_names_limit_values_and_errno() {
        // Run in a child so the test process keeps its limits.
        // SAFETY: the child only calls async-signal-safe-enough code and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                use nix::sys::resource::{getrlimit, setrlimit, Resource};
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
