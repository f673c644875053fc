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
/// child, reparented to the agent (PID 1), carries on. A raw fork: this
/// process is a raw clone3 of the agent (see `rund_sys::process::fork_raw`).
pub fn fork_into_pid_ns(sync: &OwnedFd) -> Result<(), NsError> {
    match rund_sys::process::fork_raw().map_err(NsError::Fork)? {
        None => Ok(()),
        Some(child) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use nix::sys::wait::{waitpid, WaitStatus};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// Stands for a lock libc's fork takes (musl's thread list, the heap's).
    static LIBC_LOCK: Mutex<()> = Mutex::new(());
    static ARMED: AtomicBool = AtomicBool::new(false);

    extern "C" fn take_the_lock() {
        if ARMED.load(Ordering::SeqCst) {
            drop(LIBC_LOCK.lock());
        }
    }

    /// An exec into a container forks into its pid namespace from a raw
    /// clone3 child of the agent. A lock of libc's fork that was held in
    /// the agent at the clone (here: one its fork handler takes) stays held
    /// in that child for ever: musl's thread-list lock, held by a thread
    /// being created, hung an ExecProcess so. The fork must not take it.
    #[test]
    fn the_pid_namespace_fork_takes_no_lock_of_libcs_fork() {
        assert_eq!(
            // SAFETY: the handler only reads an atomic and takes a mutex.
            unsafe { libc::pthread_atfork(Some(take_the_lock), None, None) },
            0
        );
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let held = LIBC_LOCK.lock().unwrap();
        ARMED.store(true, Ordering::SeqCst);
        let pid = match rund_sys::process::clone3(CloneFlags::empty()).unwrap() {
            // The child's copy of the lock stays held.
            None => {
                let code = match fork_into_pid_ns(&theirs) {
                    Ok(()) => 0,
                    Err(_) => 3,
                };
                // SAFETY: leaves the forked test child (and its child) at once.
                unsafe { libc::_exit(code) }
            }
            Some(pid) => pid,
        };
        ARMED.store(false, Ordering::SeqCst);
        drop(held);
        drop(theirs);
        let mut fds = [PollFd::new(ours.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(10_000u16)).unwrap();
        if ready == 0 {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(pid, None);
            panic!("the fork into the pid namespace waited on a lock of libc's fork");
        }
        let (msg, _) = rund_proto::fdpass::recv_msg::<ChildMsg>(ours.as_fd()).unwrap();
        assert!(matches!(msg, ChildMsg::Pid { pid } if pid > 0), "{msg:?}");
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
    }
}
