//! An fd for a user namespace with given maps, without keeping a process
//! of ours in it: fork a child that unshares CLONE_NEWUSER and stops
//! itself, write its maps from outside, open /proc/<child>/ns/user, then
//! kill and reap it. The fd keeps the namespace (and its maps) alive.
//! Or, once the sandbox agent runs, take its namespace: `userns_of_pid`.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::idmap::{self, IdMapping};
use super::UsernsError;

/// The user namespace of a running process (e.g. the sandbox agent).
pub fn userns_of_pid(pid: i32) -> Result<OwnedFd, UsernsError> {
    let path = format!("/proc/{pid}/ns/user");
    rund_sys::ns::open_ns("user", Path::new(&path))
        .map_err(|e| UsernsError::Namespace(format!("{path}: {e}")))
}

/// A new user namespace with these maps (validated first), as an fd.
pub fn userns_with_maps(uid: &[IdMapping], gid: &[IdMapping]) -> Result<OwnedFd, UsernsError> {
    idmap::validate("uid_map", uid)?;
    idmap::validate("gid_map", gid)?;
    let child = Child::fork()?;
    let status = loop {
        match waitpid(child.0, Some(WaitPidFlag::WUNTRACED)) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    };
    match status {
        Ok(WaitStatus::Stopped(..)) => {}
        Ok(WaitStatus::Exited(_, code)) => {
            child.reaped();
            return Err(UsernsError::Namespace(format!(
                "unshare(CLONE_NEWUSER): {}",
                std::io::Error::from_raw_os_error(code)
            )));
        }
        Ok(other) => {
            // Killed by someone else: already reaped, its pid may be reused.
            child.reaped();
            return Err(UsernsError::Namespace(format!(
                "helper process: unexpected wait status {other:?}"
            )));
        }
        Err(e) => {
            return Err(UsernsError::Namespace(format!(
                "waiting for the helper process: {e}"
            )))
        }
    }
    idmap::write_maps(child.0.as_raw(), uid, gid)?;
    userns_of_pid(child.0.as_raw())
    // `child` is killed and reaped on drop.
}

/// Our forked helper; killed and reaped when dropped.
struct Child(Pid, bool);

impl Child {
    fn fork() -> Result<Child, UsernsError> {
        // SAFETY: the shim is multi-threaded, so the child only makes
        // async-signal-safe raw syscalls (prctl, close_range, unshare,
        // raise, _exit) and never returns into Rust code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(UsernsError::Namespace(format!(
                "fork: {}",
                std::io::Error::last_os_error()
            )));
        }
        if pid == 0 {
            // SAFETY: as above; every call is a plain syscall on no shared memory.
            unsafe { child_main() }
        }
        Ok(Child(Pid::from_raw(pid), false))
    }

    fn reaped(mut self) {
        self.1 = true;
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.1 {
            let _ = kill(self.0, Signal::SIGKILL);
            let _ = waitpid(self.0, None);
        }
    }
}

/// Runs in the forked child: unshare, stop, and exit with errno on failure.
///
/// # Safety
/// Only in the child of `fork`; it never returns.
unsafe fn child_main() -> ! {
    // SAFETY: raw async-signal-safe syscalls with plain-value arguments and
    // the thread's own errno; see `Child::fork`.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Do not hold the shim's fds (pipes, sockets) open while we live.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            libc::_exit(*libc::__errno_location());
        }
        libc::raise(libc::SIGSTOP);
        libc::_exit(0)
    }
}
