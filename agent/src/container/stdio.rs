//! Wiring a process' stdio: passed fds, a console, or /dev/null.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::fds::PassedFds;

#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("dup2 onto fd {target}: {errno}")]
    Dup { target: i32, errno: Errno },
    #[error("open /dev/null: {0}")]
    DevNull(std::io::Error),
    #[error("setsid: {0}")]
    Setsid(Errno),
    #[error("TIOCSCTTY on the console: {0}")]
    Ctty(Errno),
}

fn dup_to(fd: &impl AsFd, target: i32) -> Result<(), StdioError> {
    // SAFETY: dup2 onto 0..2 only replaces this process' own stdio.
    let r = unsafe { libc::dup2(fd.as_fd().as_raw_fd(), target) };
    Errno::result(r)
        .map(drop)
        .map_err(|errno| StdioError::Dup { target, errno })
}

/// Must run before pivot_root: /dev/null is the agent's.
pub fn setup(fds: &mut PassedFds) -> Result<(), StdioError> {
    if fds.console.is_some() {
        setup_console_fds(fds)?;
        return take_ctty();
    }
    setup_plain(fds)
}

/// Points 0, 1 and 2 at the console without taking it as the controlling
/// terminal (an exec does that only after its last fork: a terminal's
/// session leader that exits would SIGHUP the process).
pub fn setup_console_fds(fds: &mut PassedFds) -> Result<(), StdioError> {
    if let Some(console) = fds.console.take() {
        for t in 0..3 {
            dup_to(&console, t)?;
        }
        return Ok(());
    }
    setup_plain(fds)
}

/// New session with fd 0 (the console) as its controlling terminal.
pub fn take_ctty() -> Result<(), StdioError> {
    nix::unistd::setsid().map_err(StdioError::Setsid)?;
    // SAFETY: TIOCSCTTY takes an integer argument.
    let r = unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) };
    Errno::result(r).map_err(StdioError::Ctty)?;
    Ok(())
}

fn setup_plain(fds: &mut PassedFds) -> Result<(), StdioError> {
    let null = || -> Result<OwnedFd, StdioError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(StdioError::DevNull)
    };
    for (t, fd) in [
        (0, fds.stdin.take()),
        (1, fds.stdout.take()),
        (2, fds.stderr.take()),
    ] {
        let fd = match fd {
            Some(fd) => fd,
            None => null()?,
        };
        dup_to(&fd, t)?;
    }
    Ok(())
}
