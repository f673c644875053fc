//! Plain log lines on stderr, which the shim captures as the sandbox log.
//! A pod's routine steps are `debug!`: each line ends up in containerd's
//! log, which costs containerd CPU per line.

use std::sync::atomic::{AtomicBool, Ordering};

static DEBUG: AtomicBool = AtomicBool::new(false);

pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

pub fn write(level: &str, msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let line = format!(
        "{}.{:06} rund-agent[{}] {level}: {msg}\n",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id()
    );
    // One write per line so concurrent writers (agent, children) do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[macro_export]
macro_rules! info {
    ($($t:tt)*) => { $crate::log::write("info", format_args!($($t)*)) };
}

#[macro_export]
macro_rules! warn {
    ($($t:tt)*) => { $crate::log::write("warn", format_args!($($t)*)) };
}

#[macro_export]
macro_rules! debug {
    ($($t:tt)*) => { if $crate::log::debug_enabled() { $crate::log::write("debug", format_args!($($t)*)) } };
}
