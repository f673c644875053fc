//! Logging to containerd's `log` FIFO in the bundle (the server's cwd).

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

static LOG: OnceLock<std::fs::File> = OnceLock::new();

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
        .with_writer(|| LOG.get().expect("log set").try_clone().expect("dup log"))
        .try_init();
}

/// A dup of the log for the agent's stderr.
pub fn agent_log_fd() -> Option<OwnedFd> {
    LOG.get()
        .and_then(|f| f.try_clone().ok())
        .map(OwnedFd::from)
}
