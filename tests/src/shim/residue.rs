//! What a container may leave behind on the host: its cgroup dirs, rund-agent processes under
//! the shim, mounts under the bundle. Bad input must leave none of them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::leaks::{cgroup_mounts, mount_points_under};

/// Leftovers of one container, as found on the host.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Residue {
    /// `<hierarchy>/<cgroupsPath>` dirs that exist.
    pub cgroups: Vec<PathBuf>,
    /// rund-agent processes whose parent is the shim.
    pub agents: Vec<u32>,
    /// Mount points under the bundle.
    pub mounts: Vec<PathBuf>,
}

impl Residue {
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.agents.is_empty() && self.mounts.is_empty()
    }
}

impl fmt::Display for Residue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cgroups {:?}, rund-agent pids {:?}, mounts {:?}",
            self.cgroups, self.agents, self.mounts
        )
    }
}

/// The residue of the container with `cgroups_path` and `bundle`, run by shim `shim_pid`.
pub fn residue(shim_pid: u32, bundle: &Path, cgroups_path: &str) -> Residue {
    Residue {
        cgroups: cgroup_dirs_for(cgroups_path),
        agents: agents_of(shim_pid),
        mounts: mount_points_under(&[bundle.to_path_buf()]),
    }
}

/// Polls [`residue`] until it is empty or `limit` passes (teardown is asynchronous in places);
/// returns the last residue seen.
pub fn settle(shim_pid: u32, bundle: &Path, cgroups_path: &str, limit: Duration) -> Residue {
    let deadline = Instant::now() + limit;
    loop {
        let r = residue(shim_pid, bundle, cgroups_path);
        if r.is_empty() || Instant::now() >= deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every hierarchy's dir for `cgroups_path` that exists.
pub fn cgroup_dirs_for(cgroups_path: &str) -> Vec<PathBuf> {
    cgroup_mounts()
        .into_iter()
        .map(|m| m.join(cgroups_path.trim_start_matches('/')))
        .filter(|d| d.is_dir())
        .collect()
}

/// Pids of processes named rund-agent (zombies included) whose parent is `parent`.
pub fn agents_of(parent: u32) -> Vec<u32> {
    children_of(parent)
        .into_iter()
        .filter(|(_, comm)| comm == "rund-agent")
        .map(|(pid, _)| pid)
        .collect()
}

/// (pid, comm) of every child of `parent`.
pub fn children_of(parent: u32) -> Vec<(u32, String)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (ppid, comm) = stat_of(pid)?;
            (ppid == parent).then_some((pid, comm))
        })
        .collect()
}

/// (ppid, comm) from /proc/<pid>/stat.
fn stat_of(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may hold spaces and parens: it ends at the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let ppid = stat
        .get(close + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ppid, comm))
}

/// The per-parent states in the cgroup pool's `state` dir (one dir per pooled parent). The
/// host's cgroup layout, remembered there once per node (`.layout.json`), is not one.
pub fn pool_states(state: &Path) -> Vec<String> {
    std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".layout.json")
        .collect()
}
