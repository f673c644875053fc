//! gc beyond the long-lived parents: walk the tree for what dead shims left
//! (kept cgroups, see keep.rs: the marker's pid says whose), and empty the
//! parents whose state dir says they were pooled but are no longer
//! long-lived (an older rund batch-filled every pod's cgroup and kept a
//! state dir per pod; on v2 it ran containers in slots). Slots of parents
//! this state dir does not know are left alone: another rund (another
//! state dir) may own them.

use super::keep::{drain_one, parse_kept, pid_alive};
use super::{is_slot, unique_suffix, Pool};
use crate::fs::CgroupFs;
use crate::hierarchy::{Hierarchy, V1Hierarchy};
use crate::path::RESERVED_PREFIX;
use crate::{ctl, tree};
use std::path::{Path, PathBuf};

/// Deeper than any real cgroup tree; stops a pathological walk.
const MAX_DEPTH: usize = 32;

/// Every directory under `root` (relative), with its children; rund's own
/// directories are listed but not entered.
fn walk(
    fs: &dyn CgroupFs,
    root: &Path,
    rel: PathBuf,
    depth: usize,
    out: &mut Vec<(PathBuf, Vec<String>)>,
) {
    let Ok(children) = fs.subdirs(&root.join(&rel)) else {
        return;
    };
    if depth < MAX_DEPTH {
        for c in children.iter().filter(|c| !c.starts_with(RESERVED_PREFIX)) {
            walk(fs, root, rel.join(c), depth + 1, out);
        }
    }
    out.push((rel, children));
}

/// Drain the kept cgroups of dead shims anywhere in the tree (v1).
pub(super) fn sweep_kept(pool: &Pool) -> usize {
    let Hierarchy::V1 {
        hierarchies: hs, ..
    } = &pool.hier
    else {
        return 0;
    };
    let fs = pool.fs.as_ref();
    let Some(leader) = hs.first() else { return 0 };
    let mut all = Vec::new();
    walk(fs, &leader.mount, PathBuf::new(), 0, &mut all);
    let mut n = 0;
    for (rel, children) in all {
        for c in &children {
            if let Some((pid, name)) = parse_kept(c) {
                if !pid_alive(pid) {
                    n += drain_one(fs, &pool.hier, &rel, c, name);
                }
            }
        }
    }
    n
}

/// Remove the free slots of a parent that is no longer pooled.
pub(super) fn drain_parent(pool: &Pool, rel: &Path) -> usize {
    let fs = pool.fs.as_ref();
    match &pool.hier {
        Hierarchy::V1 {
            hierarchies: hs, ..
        } => {
            let Some(leader) = hs.first() else { return 0 };
            let children = fs.subdirs(&leader.mount.join(rel)).unwrap_or_default();
            let mut n = 0;
            for c in children.iter().filter(|c| is_slot(c)) {
                n += drain_slot(fs, hs, rel, c);
            }
            // Follower-only slots (a refill that died half-way).
            for h in &hs[1..] {
                for c in fs.subdirs(&h.mount.join(rel)).unwrap_or_default() {
                    if is_slot(&c) && !children.contains(&c) {
                        n += usize::from(rmdir_idle(fs, &h.mount.join(rel).join(&c)));
                    }
                }
            }
            n
        }
        Hierarchy::V2 { root } => fs
            .subdirs(&root.join(rel))
            .unwrap_or_default()
            .iter()
            .filter(|c| c.starts_with(RESERVED_PREFIX))
            .map(|c| usize::from(rmdir_idle(fs, &root.join(rel).join(c))))
            .sum(),
    }
}

/// Take a free slot with a leader rename (so nobody claims it meanwhile),
/// then remove it everywhere.
fn drain_slot(fs: &dyn CgroupFs, hs: &[V1Hierarchy], rel: &Path, slot: &str) -> usize {
    let leader = hs[0].mount.join(rel);
    let scratch = leader.join(format!(".rund-pool~gc-{}", unique_suffix()));
    if fs.rename(&leader.join(slot), &scratch).is_err() {
        return 0;
    }
    let mut n = 0;
    for h in &hs[1..] {
        n += usize::from(rmdir_idle(fs, &h.mount.join(rel).join(slot)));
    }
    n + usize::from(rmdir_idle(fs, &scratch))
}

/// rmdir of a cgroup with no processes and no children; false otherwise.
fn rmdir_idle(fs: &dyn CgroupFs, d: &Path) -> bool {
    if !ctl::procs(fs, d).is_ok_and(|p| p.is_empty()) {
        return false;
    }
    if !fs.subdirs(d).is_ok_and(|c| c.is_empty()) {
        return false;
    }
    matches!(tree::rmdir_if_present(fs, d), Ok(true))
}
