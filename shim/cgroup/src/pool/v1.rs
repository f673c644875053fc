//! The v1 pool: claim by rename in the leader hierarchy, then the followers.

use super::{is_slot, new_slot_name, reset, Claim, Pool, Released};
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::hierarchy::V1Hierarchy;
use crate::path::CgroupPath;
use crate::resources::devices::v1 as devices;
use crate::{ctl, tree};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Leader name of a cgroup being recycled: `<prefix><pid hex>-<...>`.
const RECYCLING_PREFIX: &str = ".rund-pool~r-";

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn hierarchies(pool: &Pool) -> &[V1Hierarchy] {
    match &pool.hier {
        crate::hierarchy::Hierarchy::V1 { hierarchies, .. } => hierarchies,
        crate::hierarchy::Hierarchy::V2 { .. } => &[],
    }
}

/// The claim and the number of free slots seen.
pub(super) fn claim(pool: &Pool, path: &CgroupPath) -> Result<(Option<Claim>, usize)> {
    let parent = path.parent();
    let mut slots = pool.free_slots(&parent)?;
    if slots.is_empty() {
        return Ok((None, 0));
    }
    // Racing claimers start at different slots, so most first tries win.
    let len = slots.len();
    slots.rotate_left(super::spread(path.name()) % len);
    let leader_parent = pool.leader_dir(&parent);
    let target = leader_parent.join(path.name());
    for slot in slots {
        match pool.fs.rename(&leader_parent.join(&slot), &target) {
            Ok(()) => return finish_claim(pool, &parent, &slot, path).map(|c| (Some(c), len)),
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) if matches!(errno(&e), libc::EEXIST | libc::ENOTEMPTY) => {
                return Err(Error::AlreadyExists(target));
            }
            Err(e) => return Err(Error::io("rename", target, e)),
        }
    }
    Ok((None, len))
}

/// The leader rename is won: move the same slot in every follower.
fn finish_claim(pool: &Pool, parent: &Path, slot: &str, path: &CgroupPath) -> Result<Claim> {
    let fs = pool.fs.as_ref();
    let dirs = Dirs::of(&pool.hier, &path.rel());
    let Dirs::V1(list) = &dirs else {
        unreachable!("v1 pool on v2")
    };
    let mut devices_baseline = true;
    for (i, (h, dir)) in list.iter().enumerate().skip(1) {
        let from = h.mount.join(parent).join(slot);
        let r = follower_rename(fs, h, &from, dir);
        if let Ok(true) = r {
            // Made afresh: it inherited the parent's rules, not the baseline.
            devices_baseline &= !h.has("devices");
        }
        if let Err(e) = r {
            // Undo: drop what we own; the rest of the slot is gc's.
            for (_, d) in list[..i].iter() {
                let _ = tree::rmdir_retry(fs, d);
            }
            for (h2, _) in list[i..].iter() {
                let _ = tree::rmdir_retry(fs, &h2.mount.join(parent).join(slot));
            }
            return Err(e);
        }
    }
    Ok(Claim {
        dirs,
        devices_baseline,
    })
}

/// `Ok(true)` when the directory had to be made instead of renamed.
fn follower_rename(
    fs: &dyn crate::fs::CgroupFs,
    h: &V1Hierarchy,
    from: &Path,
    to: &Path,
) -> Result<bool> {
    let cpuset = h.has("cpuset");
    for attempt in 0..2 {
        match fs.rename(from, to) {
            Ok(()) => return Ok(false),
            // The slot lost this hierarchy (crash or gc): make the dir instead.
            Err(e) if errno(&e) == libc::ENOENT => {
                return tree::mkdir_one(fs, to, cpuset).map(|_| true);
            }
            // An empty leftover of an earlier container of this name: replace it.
            Err(e) if matches!(errno(&e), libc::EEXIST | libc::ENOTEMPTY) && attempt == 0 => {
                if !ctl::procs(fs, to)?.is_empty() {
                    return Err(Error::AlreadyExists(to.to_path_buf()));
                }
                tree::rmdir_retry(fs, to)?;
            }
            Err(e) => return Err(Error::io("rename", from, e)),
        }
    }
    Err(Error::AlreadyExists(to.to_path_buf()))
}

/// A recycle whose cgroup has left its container's path: the leader is at
/// its marker, the followers at the slot name. Its reset and publication
/// are left ([`finish`]).
#[derive(Debug)]
pub(crate) struct Detached {
    st: super::state::ParentState,
    /// Each hierarchy's directory where it is now (leader first).
    dirs: Dirs,
    slot: String,
}

/// What [`detach`] did.
pub(crate) enum Detach {
    Done(Released),
    Detached(Detached),
}

/// The first half of a recycle: the cgroup leaves its path by rename (the
/// container's path is free again at once), its limits still the last
/// tenant's; or, past high water, it is removed.
pub(crate) fn detach(pool: &Pool, path: &CgroupPath, dirs: &Dirs) -> Result<Detach> {
    let fs = pool.fs.as_ref();
    let parent = path.parent();
    let st = pool.state(&parent)?;
    if pool.free_slots(&parent)?.len() >= pool.cfg.high {
        tracing::debug!(path = %path.rel().display(), "cgroup removed, not recycled: pool past high water");
        tree::remove_reclaiming(fs, dirs, pool.cfg.reclaim_on_remove)?;
        st.bump(|c| c.removed += 1)?;
        return Ok(Detach::Done(Released::Removed));
    }
    let Dirs::V1(list) = dirs else {
        unreachable!("v1 pool on v2")
    };
    let suffix = super::unique_suffix();
    let slot = format!("{}{suffix}", crate::path::SLOT_PREFIX);
    let marker = format!("{RECYCLING_PREFIX}{suffix}");
    let mut done: Vec<PathBuf> = Vec::new();
    // 1. The leader becomes a "recycling" marker (pid inside): gc leaves the
    //    followers of a live recycler alone and cleans up after a dead one,
    //    and no claimer sees the slot until it is published.
    let leader_marker = list[0].0.mount.join(&parent).join(&marker);
    if let Err(e) = fs.rename(&list[0].1, &leader_marker) {
        tracing::warn!(%e, "recycle rename failed");
        return abort_recycle(pool, dirs, &done, &st).map(Detach::Done);
    }
    done.push(leader_marker);
    // 2. Followers take the slot name.
    for (h, dir) in &list[1..] {
        let to = h.mount.join(&parent).join(&slot);
        match fs.rename(dir, &to) {
            Ok(()) => done.push(to),
            Err(e) if errno(&e) == libc::ENOENT => {
                // Missing in this hierarchy (partial create): complete the slot.
                if let Err(e) = tree::mkdir_one(fs, &to, h.has("cpuset")) {
                    tracing::warn!(%e, "cannot complete recycled slot");
                    return abort_recycle(pool, dirs, &done, &st).map(Detach::Done);
                }
                done.push(to);
            }
            Err(e) => {
                tracing::warn!(%e, dir = %dir.display(), "recycle rename failed");
                return abort_recycle(pool, dirs, &done, &st).map(Detach::Done);
            }
        }
    }
    let moved = list.iter().zip(done).map(|((h, _), d)| (h.clone(), d));
    Ok(Detach::Detached(Detached {
        st,
        dirs: Dirs::V1(moved.collect()),
        slot,
    }))
}

/// The second half: reset every limit (and the device baseline) where the
/// cgroup now is, then publish the leader, which makes the slot claimable.
/// A reset that fails removes the cgroup instead.
pub(crate) fn finish(pool: &Pool, d: Detached) -> Result<Released> {
    let fs = pool.fs.as_ref();
    let Dirs::V1(list) = &d.dirs else {
        unreachable!("v1 pool on v2")
    };
    // The slot's name beside the leader's marker.
    let published = list[0].1.with_file_name(&d.slot);
    let r = reset::v1(fs, &d.dirs).and_then(|()| {
        fs.rename(&list[0].1, &published)
            .map_err(|e| Error::io("rename", &published, e))
    });
    if let Err(e) = r {
        tracing::warn!(%e, "cannot reset or publish a recycled cgroup; removing it instead");
        return abort_recycle(pool, &d.dirs, &[], &d.st);
    }
    d.st.bump(|c| c.recycles += 1)?;
    Ok(Released::Recycled)
}

fn abort_recycle(
    pool: &Pool,
    dirs: &Dirs,
    done: &[PathBuf],
    st: &super::state::ParentState,
) -> Result<Released> {
    let fs = pool.fs.as_ref();
    let mut first = None;
    for d in done {
        if let Err(e) = tree::rmdir_retry(fs, d) {
            first.get_or_insert(e);
        }
    }
    if let Err(e) = tree::remove(fs, dirs) {
        first.get_or_insert(e);
    }
    st.bump(|c| c.removed += 1)?;
    first.map_or(Ok(Released::Removed), Err)
}

/// Make `n` complete slots (caller holds the refill lock).
pub(super) fn make_slots(pool: &Pool, parent: &Path, n: usize) -> Result<usize> {
    let fs = pool.fs.as_ref();
    tree::mkdir_parents(fs, &pool.hier, parent)?;
    let hs = hierarchies(pool);
    for _ in 0..n {
        let slot = new_slot_name();
        let mut made: Vec<PathBuf> = Vec::new();
        // Followers first, leader last.
        for h in hs.iter().skip(1).chain(hs.first()) {
            let d = h.mount.join(parent).join(&slot);
            let r = tree::mkdir_one(fs, &d, h.has("cpuset")).and_then(|_| {
                made.push(d.clone());
                if h.has("devices") {
                    devices::apply_v1_baseline(fs, &d)?;
                }
                Ok(())
            });
            if let Err(e) = r {
                for m in made.iter().rev() {
                    let _ = fs.rmdir(m);
                }
                return Err(e);
            }
        }
    }
    Ok(n)
}

/// Remove follower-only slots and gc scratch dirs, and free slots beyond
/// `keep` (each taken first by a leader rename, so a racing claim cannot get it).
pub(super) fn gc(pool: &Pool, parent: &Path, keep: usize) -> Result<usize> {
    let fs = pool.fs.as_ref();
    let hs = hierarchies(pool);
    let Some(leader) = hs.first() else {
        return Ok(0);
    };
    let leader_parent = leader.mount.join(parent);
    let list = |dir: &Path| -> Vec<String> { fs.subdirs(dir).unwrap_or_default() };
    // Followers are listed before the leader: a recycle renames its leader to
    // a marker before it renames the followers, so any follower slot seen
    // here already has its marker (or its published slot) in the leader.
    let followers: Vec<(PathBuf, Vec<String>)> = hs
        .iter()
        .skip(1)
        .map(|h| {
            let dir = h.mount.join(parent);
            let slots = list(&dir).into_iter().filter(|n| is_slot(n)).collect();
            (dir, slots)
        })
        .collect();
    let mut removed = 0;
    // Slot names whose recycle is still running in a live process.
    let mut protected: BTreeSet<String> = BTreeSet::new();
    let mut leader_slots: BTreeSet<String> = BTreeSet::new();
    for n in list(&leader_parent) {
        if is_slot(&n) {
            leader_slots.insert(n);
            continue;
        }
        if let Some(suffix) = n.strip_prefix(RECYCLING_PREFIX) {
            if recycler_alive(suffix) {
                protected.insert(format!("{}{suffix}", crate::path::SLOT_PREFIX));
                continue;
            }
        }
        // Kept cgroups belong to their shim (see keep.rs), not to this pool.
        if n.starts_with(crate::path::RESERVED_PREFIX) && !n.starts_with(super::keep::KEPT_PREFIX) {
            removed += usize::from(tree::rmdir_retry(fs, &leader_parent.join(&n)).is_ok());
        }
    }
    // Concurrent recycles can overshoot high water a little: trim here.
    let excess: Vec<String> = leader_slots.iter().skip(keep).cloned().collect();
    let mut trimmed: BTreeSet<String> = BTreeSet::new();
    for slot in excess {
        leader_slots.remove(&slot);
        let scratch = leader_parent.join(format!(".rund-pool~gc-{}", super::unique_suffix()));
        if fs.rename(&leader_parent.join(&slot), &scratch).is_ok() {
            removed += usize::from(tree::rmdir_retry(fs, &scratch).is_ok());
            // By name, not from the snapshot: a recycle that overtook the
            // listing above may have renamed followers after they were listed.
            for h in hs.iter().skip(1) {
                let d = h.mount.join(parent).join(&slot);
                removed += usize::from(matches!(tree::rmdir_if_present(fs, &d), Ok(true)));
            }
            trimmed.insert(slot);
        }
    }
    for (dir, slots) in followers {
        for n in slots {
            if !leader_slots.contains(&n) && !protected.contains(&n) && !trimmed.contains(&n) {
                removed += usize::from(tree::rmdir_retry(fs, &dir.join(&n)).is_ok());
            }
        }
    }
    Ok(removed)
}

/// Whether the process that started a recycle (pid in hex first) still runs.
fn recycler_alive(suffix: &str) -> bool {
    suffix
        .split('-')
        .next()
        .and_then(|p| i32::from_str_radix(p, 16).ok())
        .is_some_and(super::keep::pid_alive)
}
