//! pidfd of a child we spawned: lets a timeout kill exactly that child even
//! if another thread reaps it concurrently.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct PidFd(OwnedFd);

impl PidFd {
    pub fn open(pid: u32) -> std::io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
        // no memory is shared with the kernel.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a fresh fd that nothing else owns.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// SIGKILL through the pidfd; a no-op (ESRCH) once the child is gone.
    pub fn kill(&self) {
        // SAFETY: signals the process the pidfd refers to; null siginfo is
        // allowed and means "as kill(2)".
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}
