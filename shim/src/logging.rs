//! Logging to containerd's `log` FIFO in the bundle (the server's cwd).
//!
//! Every event is written through the one shared file: no fd is made per
//! event, so running out of fds never stops logging, and a failed write is
//! dropped, never a panic.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

static LOG: OnceLock<File> = OnceLock::new();

pub fn init(debug: bool) {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("log")
        .or_else(|_| OpenOptions::new().write(true).open("/dev/null"));
    let Ok(file) = file else { return };
    let _ = LOG.set(file);
    let level = if debug { "debug" } else { "info" };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("RUND_LOG").unwrap_or_else(|_| level.into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(|| SharedLog)
        .try_init();
}

/// A handle on the shared log file; writes go nowhere before `init`.
struct SharedLog;

impl Write for SharedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match LOG.get() {
            Some(mut f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A dup of the log for the agent's stderr (none when fds ran out).
pub fn agent_log_fd() -> Option<OwnedFd> {
    LOG.get()
        .and_then(|f| f.try_clone().ok())
        .map(OwnedFd::from)
}
