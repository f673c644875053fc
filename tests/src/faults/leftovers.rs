//! [`Leftovers`]: the [`LeakSnapshot`] plus rund's state files, leases and the fd counts of
//! containerd and of long-lived shims, taken before a scenario and compared after it.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::probe::{fd_count, fd_kinds, files_under, leases};
use crate::containerd::Containerd;
use crate::leaks::LeakSnapshot;

/// Everything a scenario may leave behind, beyond the [`LeakSnapshot`]: files under rund's
/// state dirs (pool and lease state), leases, containerd's fd count and the fd counts of
/// shims that run throughout.
#[derive(Debug, Clone)]
pub struct Leftovers {
    pub snap: LeakSnapshot,
    pub state_files: BTreeSet<String>,
    pub leases: Vec<String>,
    pub containerd_fds: usize,
    /// (pid, fd count) of shims to watch.
    pub shim_fds: Vec<(u32, usize)>,
}

impl Leftovers {
    /// Takes everything; `state` is rund's `state_dir` (its subdirs included), `shims` the
    /// long-lived shims whose fd counts must not grow.
    pub fn take(ctd: &Containerd, state: &Path, shims: &[u32]) -> Leftovers {
        let mut snap = LeakSnapshot::take(ctd);
        snap.cgroups.retain(|c| !is_kept_follower(c));
        Leftovers {
            snap,
            state_files: files_under(&[state.to_path_buf()]),
            leases: leases(state),
            containerd_fds: ctd.pid().and_then(fd_count).unwrap_or(0),
            shim_fds: shims
                .iter()
                .map(|&p| (p, fd_count(p).unwrap_or(0)))
                .collect(),
        }
    }

    /// What `after` has beyond `self`; `None` when clean.
    pub fn diff(&self, after: &Leftovers) -> Option<String> {
        let mut out = self.snap.diff(&after.snap).unwrap_or_default();
        let new_files: Vec<&String> = after
            .state_files
            .difference(&self.state_files)
            .filter(|f| !is_fixture(f))
            .collect();
        if !new_files.is_empty() {
            out.push_str(&format!("stale state files: {new_files:?}\n"));
        }
        let new_leases: Vec<&String> = after
            .leases
            .iter()
            .filter(|l| !self.leases.contains(l))
            .collect();
        if !new_leases.is_empty() {
            out.push_str(&format!("leases left: {new_leases:?}\n"));
        }
        if after.containerd_fds > self.containerd_fds {
            out.push_str(&format!(
                "containerd fds: {} -> {}\n",
                self.containerd_fds, after.containerd_fds
            ));
        }
        for (pid, before) in &self.shim_fds {
            if let Some((_, now)) = after.shim_fds.iter().find(|(p, _)| p == pid) {
                if now > before {
                    out.push_str(&format!("shim {pid} fds: {before} -> {now}\n"));
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// A cgroup (`<mount>:<dir>`) a pod's shim keeps for the pod's next container (v1 reuse inside
/// a pod): its leader hierarchy holds the marker `.rund-pool~k-<pid hex>-<name>` and the other
/// hierarchies keep `<name>` until the next claim or the pod's end. By design, not a leak.
fn is_kept_follower(entry: &str) -> bool {
    let Some((_, dir)) = entry.split_once(':') else {
        return false;
    };
    let dir = Path::new(dir);
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return false;
    };
    let suffix = format!("-{}", name.to_string_lossy());
    let Some(rel) = crate::leaks::cgroup_mounts()
        .into_iter()
        .find_map(|m| parent.strip_prefix(&m).ok().map(Path::to_path_buf))
    else {
        return false;
    };
    crate::leaks::cgroup_mounts().iter().any(|m| {
        std::fs::read_dir(m.join(&rel)).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(".rund-pool~k-") && n.ends_with(&suffix)
            })
        })
    })
}

/// Lock files, the pool's counters and meta and the leases file are made once and kept by
/// design (lease entries are compared on their own).
fn is_fixture(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    // A per-node shim's log outlives the node, as any log does.
    let node_log = name.starts_with("node-") && name.ends_with(".log");
    name.ends_with(".lock")
        || node_log
        // The host's cgroup layout, remembered once per node (rund-cgroup's layout_cache).
        || ["leases.json", "counters.json", "meta.json", ".layout.json"].contains(&name)
}

/// Re-takes [`Leftovers`] until nothing is left beyond `before` or `grace` passes. Returns
/// what is left (`None`: clean) and the last take.
pub fn wait_clean(
    ctd: &Containerd,
    before: &Leftovers,
    state: &Path,
    grace: Duration,
) -> (Option<String>, Leftovers) {
    let shims: Vec<u32> = before.shim_fds.iter().map(|(p, _)| *p).collect();
    let deadline = Instant::now() + grace;
    loop {
        let after = Leftovers::take(ctd, state, &shims);
        match before.diff(&after) {
            None => return (None, after),
            Some(d) if Instant::now() >= deadline => return (Some(d), after),
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// [`wait_clean`], panicking with what is left. Returns the last take.
pub fn assert_clean_within(
    ctd: &Containerd,
    before: &Leftovers,
    state: &Path,
    grace: Duration,
) -> Leftovers {
    match wait_clean(ctd, before, state, grace) {
        (None, after) => after,
        (Some(d), _) => {
            let kinds = ctd.pid().map(fd_kinds).unwrap_or_default();
            panic!("left behind:\n{d}\ncontainerd fds now: {kinds:?}");
        }
    }
}
