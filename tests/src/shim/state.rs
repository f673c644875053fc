//! State shared by every direct shim of one test process: a rund config with a private state
//! dir (cgroup pool lock, counters) and the cgroup parent `/rit-direct-<pid>`. Both are removed
//! at process exit, and stale ones of dead test processes on first use.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::bundle::{cgroup_parent, DIRECT_BASE, NAMESPACE};
use super::error::{IoCtx, Result};
use crate::leaks::{cgroup_mounts, remove_cgroups};

static CONFIG: OnceLock<PathBuf> = OnceLock::new();

/// The rund config file every direct shim of this process gets as `RUND_CONFIG`.
pub fn process_config() -> Result<&'static Path> {
    if let Some(p) = CONFIG.get() {
        return Ok(p);
    }
    // Tests of one process start at once: one writes the file, while none
    // reads it (`process_config_with` would read it half written).
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = CONFIG.get() {
        return Ok(p);
    }
    std::fs::create_dir_all(DIRECT_BASE).io("create direct base", DIRECT_BASE)?;
    remove_stale();
    let state = state_dir(std::process::id());
    std::fs::create_dir_all(&state).io("create state dir", &state)?;
    let config = state.join("rund.toml");
    let text = format!(
        "state_dir = \"{s}\"\n\n[cgroup]\nstate_dir = \"{s}/cgroup-pool\"\n",
        s = state.display()
    );
    std::fs::write(&config, text).io("write rund config", &config)?;
    let p = CONFIG.get_or_init(|| config);
    register_exit_cleanup();
    Ok(p)
}

/// A config like [`process_config`] with `extra` TOML appended (e.g. `"[userns]\nmode =
/// \"always\"\n"`), sharing the same state dirs so that all shims share one cgroup pool.
pub fn process_config_with(extra: &str) -> Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let base = process_config()?;
    if extra.is_empty() {
        return Ok(base.to_path_buf());
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    extra.hash(&mut h);
    let path = base.with_file_name(format!("rund-{:016x}.toml", h.finish()));
    let text = std::fs::read_to_string(base).io("read rund config", base)?;
    // Written aside and renamed: tests with the same extra may race.
    let tmp = path.with_extension(format!("tmp-{:?}", std::thread::current().id()));
    std::fs::write(&tmp, format!("{text}\n{extra}")).io("write rund config", &tmp)?;
    std::fs::rename(&tmp, &path).io("rename rund config", &path)?;
    Ok(path)
}

fn state_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("{DIRECT_BASE}/state-{pid}"))
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// State dirs and cgroup parents of direct-test processes that are gone.
fn remove_stale() {
    if let Ok(rd) = std::fs::read_dir(DIRECT_BASE) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("state-").and_then(|p| p.parse().ok()) {
                if !alive(pid) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let prefix = format!("{NAMESPACE}-");
    let mut stale = Vec::new();
    for m in cgroup_mounts() {
        let Ok(rd) = std::fs::read_dir(&m) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = format!("/{name}");
            if let Some(pid) = name.strip_prefix(&prefix).and_then(|p| p.parse().ok()) {
                if !alive(pid) && !stale.contains(&key) {
                    stale.push(key);
                }
            }
        }
    }
    remove_cgroups(&stale);
}

extern "C" fn cleanup_at_exit() {
    remove_cgroups(&[cgroup_parent()]);
    let _ = std::fs::remove_dir_all(state_dir(std::process::id()));
}

fn register_exit_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" fn with no captured state; it only reads
        // /proc/self/mounts and removes files and empty cgroup dirs, all valid during exit.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
    });
}
