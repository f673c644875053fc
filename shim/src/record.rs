//! What the shim records in a bundle for `delete` after a crash: the
//! sandbox agent (pid + start time, against pid reuse) and the rund config
//! in force (containerd passes no runtime options to `delete`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rund_sys::procfs::start_time;

const AGENT_FILE: &str = "rund-agent.pid";
const CONFIG_FILE: &str = "rund-config-path";

pub fn agent(bundle: &Path, pid: i32) {
    if let Some(start) = start_time(pid) {
        let _ = std::fs::write(bundle.join(AGENT_FILE), format!("{pid} {start}"));
    }
}

/// Kills the agent recorded in this bundle, if it is still the same
/// process, and waits (bounded) until it is gone.
pub fn kill_agent(bundle: &Path) {
    let file = bundle.join(AGENT_FILE);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let mut it = text.split_whitespace();
    let (Some(pid), Some(start)) = (
        it.next().and_then(|p| p.parse::<i32>().ok()),
        it.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return;
    };
    if start_time(pid) == Some(start) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        // Dead once a zombie: that is what lease liveness checks too.
        let deadline = Instant::now() + Duration::from_secs(5);
        while start_time(pid) == Some(start) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = std::fs::remove_file(file);
}

/// Records the config path the runtime options name.
pub fn config_path(bundle: &Path, path: &str) -> std::io::Result<()> {
    std::fs::write(bundle.join(CONFIG_FILE), path)
}

/// The config path recorded in this bundle, if any.
pub fn recorded_config(bundle: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(bundle.join(CONFIG_FILE)).ok()?;
    let p = text.trim();
    (!p.is_empty()).then(|| PathBuf::from(p))
}
