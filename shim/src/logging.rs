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

/// Opens the log file once (later calls keep the first): a per-pod server
/// opens it before its runtime, so the head start's agent gets it as stderr.
pub fn open(path: &std::path::Path) {
    if LOG.get().is_some() {
        return;
    }
    // Appended: a node's keeper and each node shim it starts share the file.
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .or_else(|_| OpenOptions::new().write(true).open("/dev/null"));
    if let Ok(file) = file {
        let _ = LOG.set(file);
    }
}

/// Opens the log ([`open`]) and sends tracing's events to it.
pub fn init(path: &std::path::Path, debug: bool) {
    open(path);
    if LOG.get().is_none() {
        return;
    }
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
    log_panics();
}

/// A panic's message goes to the log: the server's stderr is /dev/null, so
/// the default hook's message would be lost with the process. Written
/// directly, not through tracing (the panic may be inside it). The process
/// then aborts in every build, as a release build does (`panic = "abort"`):
/// a task's panic must not leave a half-served pod behind a live socket.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let _ = SharedLog.write_all(panic_line(info).as_bytes());
        std::process::abort();
    }));
}

fn panic_line(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let at = info.location().map(|l| l.to_string()).unwrap_or_default();
    one_line(
        std::process::id(),
        std::thread::current().name().unwrap_or("<unnamed>"),
        &at,
        message,
    )
}

/// One log line: containerd copies the log line by line.
fn one_line(pid: u32, thread: &str, at: &str, message: &str) -> String {
    let message = message.replace('\n', " ");
    format!("rund shim {pid}: thread '{thread}' panicked at {at}: {message}; aborting\n")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_one_line_with_its_thread_place_and_message() {
        assert_eq!(
            one_line(7, "tokio-rt-worker", "shim/src/a.rs:3:9", "bad\nstate"),
            "rund shim 7: thread 'tokio-rt-worker' panicked at shim/src/a.rs:3:9: bad state; aborting\n"
        );
    }
}
