//! Runs a short-lived helper program: bytes in on its stdin, its stdout and
//! stderr back, and a kill if it outlives a deadline. The static shim runs
//! what must not be loaded into a static binary (NVML, libibverbs: dlopen)
//! in the dynamic `rund` binary this way. One thread: poll(2) on the pipes
//! and a pidfd, so the kill cannot reach a recycled pid.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;

use crate::process::{pidfd_open, pidfd_send_signal};

/// What the helper left behind.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// It was killed at the deadline.
    pub timed_out: bool,
}

/// Spawns `cmd` with `input` on its stdin and collects its output; at
/// `deadline` it is killed (SIGKILL) and reaped. The child never outlives
/// the call.
pub fn run(cmd: &mut Command, input: &[u8], deadline: Duration) -> io::Result<Output> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let result = collect(&mut child, input, Instant::now() + deadline);
    if result.is_err() {
        // Not reaped yet: the pid is still this child's.
        let _ = child.kill();
    }
    let status = child.wait()?;
    result.map(|(stdout, stderr, timed_out)| Output {
        status,
        stdout,
        stderr,
        timed_out,
    })
}

type Collected = (Vec<u8>, Vec<u8>, bool);

fn collect(child: &mut Child, input: &[u8], deadline: Instant) -> io::Result<Collected> {
    let pidfd = pidfd_open(child.id() as i32)?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    if let Some(f) = &stdin {
        nonblocking(f.as_fd())?;
    }
    if let Some(f) = &stdout {
        nonblocking(f.as_fd())?;
    }
    if let Some(f) = &stderr {
        nonblocking(f.as_fd())?;
    }
    let (mut out, mut err, mut written) = (Vec::new(), Vec::new(), 0);
    if input.is_empty() {
        stdin = None;
    }
    while stdout.is_some() || stderr.is_some() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // The pidfd still names the unreaped child.
            pidfd_send_signal(pidfd.as_fd(), Signal::SIGKILL).map_err(io::Error::from)?;
            return Ok((out, err, true));
        }
        let mut fds = Vec::with_capacity(3);
        if let Some(f) = &stdin {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLOUT));
        }
        if let Some(f) = &stdout {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
        }
        if let Some(f) = &stderr {
            fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        drop(fds);
        if let Some(f) = stdin.as_mut() {
            match f.write(&input[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // It closed its stdin: it reads no more.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => written = input.len(),
                Err(e) => return Err(e),
            }
            if written == input.len() {
                stdin = None;
            }
        }
        drain(&mut stdout, &mut out)?;
        drain(&mut stderr, &mut err)?;
    }
    Ok((out, err, false))
}

/// Reads what is there; drops the pipe at EOF.
fn drain<R: Read>(pipe: &mut Option<R>, into: &mut Vec<u8>) -> io::Result<()> {
    let Some(p) = pipe.as_mut() else {
        return Ok(());
    };
    let mut buf = [0u8; 8192];
    loop {
        match p.read(&mut buf) {
            Ok(0) => {
                *pipe = None;
                return Ok(());
            }
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

#[cfg(test)]
mod tests;
