//! The v2 pool. The kernel refuses rename on cgroup2, so slots keep their
//! names. A slot is owned by whoever creates `claims/<slot>` (link(2), so
//! exactly one wins); `containers/<key>` maps the container to its slot.

use super::state::{age, create_exclusive, ParentState};
use super::Claim;
use super::{is_slot, new_slot_name, reset, Pool, Released};
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::path::CgroupPath;
use crate::{ctl, tree};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A claim without its mapping is a crash leftover once it is this old.
const CLAIM_GRACE: Duration = Duration::from_secs(10);

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.contains(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn free_slots(pool: &Pool, parent: &Path) -> Result<Vec<String>> {
    let dir = pool.leader_dir(parent);
    let all = match pool.fs.subdirs(&dir) {
        Ok(v) => v,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("readdir", dir, e)),
    };
    let claims = pool.state(parent)?.claims_dir();
    Ok(all
        .into_iter()
        .filter(|n| is_slot(n) && !claims.join(n).exists())
        .collect())
}

/// The claim and the number of free slots seen.
pub(super) fn claim(pool: &Pool, path: &CgroupPath) -> Result<(Option<Claim>, usize)> {
    let parent = path.parent();
    let st = pool.state(&parent)?;
    let mut slots = free_slots(pool, &parent)?;
    if slots.is_empty() {
        return Ok((None, 0));
    }
    let len = slots.len();
    slots.rotate_left(super::spread(path.name()) % len);
    let key = path.key();
    let base = pool.leader_dir(&parent);
    for slot in slots {
        let claim = st.claims_dir().join(&slot);
        if !create_exclusive(&claim, key.as_bytes())? {
            continue;
        }
        let dir = base.join(&slot);
        if !pool.fs.exists(&dir) {
            let _ = std::fs::remove_file(&claim);
            continue;
        }
        if !create_exclusive(&st.containers_dir().join(&key), slot.as_bytes())? {
            let _ = std::fs::remove_file(&claim);
            return Err(Error::AlreadyExists(path.rel()));
        }
        // v2 device rules are not written (BPF): no baseline to keep.
        let got = Claim {
            dirs: Dirs::V2(dir),
            devices_baseline: false,
        };
        return Ok((Some(got), len));
    }
    Ok((None, len))
}

/// The slot directory `path` was given, if it came from the pool.
pub(crate) fn mapped_slot(pool: &Pool, path: &CgroupPath) -> Result<Option<PathBuf>> {
    let parent = path.parent();
    let st = pool.state(&parent)?;
    Ok(read(&st.containers_dir().join(path.key()))
        .filter(|s| is_slot(s))
        .map(|s| pool.leader_dir(&parent).join(s)))
}

pub(super) fn release(pool: &Pool, path: &CgroupPath, dirs: &Dirs) -> Result<Released> {
    let fs = pool.fs.as_ref();
    let Dirs::V2(dir) = dirs else {
        unreachable!("v2 pool on v1")
    };
    let parent = path.parent();
    let st = pool.state(&parent)?;
    let slot = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mapping = st.containers_dir().join(path.key());
    let claim = st.claims_dir().join(&slot);
    let mut remove = !is_slot(&slot) || free_slots(pool, &parent)?.len() >= pool.cfg.high;
    if !remove {
        if let Err(e) = reset::v2(fs, dir) {
            tracing::warn!(%e, "cannot reset limits; removing the cgroup instead");
            remove = true;
        }
    }
    if remove {
        tree::rmdir_retry(fs, dir)?;
    }
    // Mapping first: a crash in between leaves a claim that gc releases.
    let _ = std::fs::remove_file(&mapping);
    if is_slot(&slot) {
        let _ = std::fs::remove_file(&claim);
    }
    if remove {
        st.bump(|c| c.removed += 1)?;
        Ok(Released::Removed)
    } else {
        st.bump(|c| c.recycles += 1)?;
        Ok(Released::Recycled)
    }
}

pub(super) fn make_slots(pool: &Pool, parent: &Path, n: usize) -> Result<usize> {
    let fs = pool.fs.as_ref();
    tree::mkdir_parents(fs, &pool.hier, parent)?;
    let base = pool.leader_dir(parent);
    for _ in 0..n {
        tree::mkdir_one(fs, &base.join(new_slot_name()), false)?;
    }
    Ok(n)
}

pub(super) fn claimed_count(st: &ParentState) -> usize {
    names(&st.claims_dir()).len()
}

/// Drop claims whose slot is gone or whose mapping never came (crash), and
/// mappings without their claim; remove free slots beyond `keep`.
pub(super) fn gc(pool: &Pool, parent: &Path, keep: usize) -> Result<usize> {
    let fs = pool.fs.as_ref();
    let st = pool.state(parent)?;
    let base = pool.leader_dir(parent);
    let mut removed = 0;
    for slot in names(&st.claims_dir()) {
        let claim = st.claims_dir().join(&slot);
        let dir = base.join(&slot);
        let key = read(&claim).unwrap_or_default();
        let mapped = read(&st.containers_dir().join(&key)).as_deref() == Some(slot.as_str());
        let stale = !fs.exists(&dir)
            || (!mapped
                && age(&claim) > CLAIM_GRACE
                && ctl::procs(fs, &dir).map(|p| p.is_empty()).unwrap_or(false));
        if stale && std::fs::remove_file(&claim).is_ok() {
            removed += 1;
        }
    }
    for key in names(&st.containers_dir()) {
        let m = st.containers_dir().join(&key);
        let Some(slot) = read(&m) else { continue };
        if read(&st.claims_dir().join(&slot)).as_deref() != Some(key.as_str())
            && age(&m) > CLAIM_GRACE
        {
            removed += usize::from(std::fs::remove_file(&m).is_ok());
        }
    }
    for slot in free_slots(pool, parent)?.into_iter().skip(keep) {
        let claim = st.claims_dir().join(&slot);
        // Take the slot like a claimer would, so nobody gets it mid-removal.
        if create_exclusive(&claim, b"%gc")? {
            removed += usize::from(tree::rmdir_retry(fs, &base.join(&slot)).is_ok());
            let _ = std::fs::remove_file(&claim);
        }
    }
    Ok(removed)
}
