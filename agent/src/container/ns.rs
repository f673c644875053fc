//! Joining namespaces in a forked child.

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::{setns, CloneFlags};

use super::sync::{report, ChildMsg};

#[derive(Debug, thiserror::Error)]
pub enum NsError {
    #[error("unknown namespace type {0:?}")]
    Unknown(String),
    #[error("setns {name}: {errno}")]
    Setns { name: String, errno: Errno },
    #[error("fork into the pid namespace: {0}")]
    Fork(Errno),
}

pub fn flag(name: &str) -> Option<CloneFlags> {
    Some(match name {
        "net" => CloneFlags::CLONE_NEWNET,
        "ipc" => CloneFlags::CLONE_NEWIPC,
        "uts" => CloneFlags::CLONE_NEWUTS,
        "cgroup" => CloneFlags::CLONE_NEWCGROUP,
        "pid" => CloneFlags::CLONE_NEWPID,
        "mnt" => CloneFlags::CLONE_NEWNS,
        "user" => CloneFlags::CLONE_NEWUSER,
        _ => return None,
    })
}

pub fn join(name: &str, fd: &OwnedFd) -> Result<(), NsError> {
    let f = flag(name).ok_or_else(|| NsError::Unknown(name.to_string()))?;
    setns(fd.as_fd(), f).map_err(|errno| NsError::Setns {
        name: name.to_string(),
        errno,
    })
}

/// After setns(pid): only children enter the namespace. Forks; the
/// intermediate reports the child's pid (as the agent sees it: the
/// intermediate still lives in the agent's pid namespace) and exits, and the
/// child, reparented to the agent (PID 1), carries on.
pub fn fork_into_pid_ns(sync: &OwnedFd) -> Result<(), NsError> {
    // SAFETY: single-threaded child of the agent; both sides continue with plain code.
    match unsafe { nix::unistd::fork() }.map_err(NsError::Fork)? {
        nix::unistd::ForkResult::Child => Ok(()),
        nix::unistd::ForkResult::Parent { child } => {
            report(
                sync.as_fd(),
                &ChildMsg::Pid {
                    pid: child.as_raw(),
                },
            );
            // SAFETY: the intermediate leaves without running destructors.
            unsafe { libc::_exit(0) }
        }
    }
}
