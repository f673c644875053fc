//! Logging to containerd's `log` FIFO in the bundle (the server's cwd), or
//! for a per-node shim to its own file.
//!
//! Every event is written through the one shared file: no fd is made per
//! event, so running out of fds never stops logging, and a failed write is
//! dropped, never a panic.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

static LOG: OnceLock<File> = OnceLock::new();

pub fn init(path: &std::path::Path, debug: bool) {
    // Appended: a node's keeper and each node shim it starts share the file.
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .or_else(|_| OpenOptions::new().write(true).open("/dev/null"));
    let Ok(file) = file else { return };
    let _ = LOG.set(file);
    let level = if debug {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    // `RUND_LOG=info,rund_shim::io=debug`: levels per target (no regex).
    let filter = std::env::var("RUND_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(|| SharedLog)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(crate::phase_layer::layer())
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
