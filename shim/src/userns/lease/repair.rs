//! Repairing a corrupt leases file. rund never resets leases silently: a
//! lost lease would let two pods share ids. `repair` instead moves the bad
//! file aside (`leases.json.corrupt-<unix seconds>`) and rebuilds the leases
//! from what is really in use: every live process whose user namespace maps
//! host ids inside the pool gets a `recovered-<ns inode>-<n>` lease owned by
//! the oldest process of that namespace (the sandbox agent). Ranges nested
//! in another (a user namespace inside a container) are dropped.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::file::{self, LeaseFile, FORMAT_VERSION};
use super::{Lease, LeaseEntry, Liveness};
use crate::userns::pool::{overlaps, Pool};
use crate::userns::UsernsError;

#[derive(Debug, Default)]
pub struct RepairReport {
    /// Where the corrupt file went; None if the file was fine.
    pub moved_aside: Option<PathBuf>,
    /// Leases rebuilt from live user namespaces.
    pub recovered: Vec<LeaseEntry>,
}

pub(super) fn repair(
    dir: &Path,
    pool: Pool,
    live: &dyn Liveness,
    proc_root: &Path,
) -> Result<RepairReport, UsernsError> {
    let locked = file::lock(dir)?;
    match locked.load() {
        Ok(_) => return Ok(RepairReport::default()),
        Err(UsernsError::Corrupt { .. }) => {}
        Err(e) => return Err(e),
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let aside = locked.path.with_extension(format!("json.corrupt-{secs}"));
    std::fs::rename(&locked.path, &aside).map_err(|source| UsernsError::State {
        path: locked.path.display().to_string(),
        source,
    })?;
    let recovered = scan(proc_root, pool, live);
    locked.store(&LeaseFile {
        version: FORMAT_VERSION,
        leases: recovered.clone(),
    })?;
    tracing::warn!(aside = %aside.display(), recovered = recovered.len(), "repaired user namespace leases");
    Ok(RepairReport {
        moved_aside: Some(aside),
        recovered,
    })
}

/// One user namespace seen in /proc: its oldest process and its extents
/// that fall in the pool (clamped to it).
struct Seen {
    ino: u64,
    pid: i32,
    start: u64,
    extents: Vec<(u32, u32)>,
}

fn scan(proc_root: &Path, pool: Pool, live: &dyn Liveness) -> Vec<LeaseEntry> {
    let mut seen: Vec<Seen> = Vec::new();
    // Our own namespace's map is the identity: it would cover the whole pool.
    let own = std::fs::metadata(proc_root.join("self/ns/user"))
        .map(|m| m.ino())
        .ok();
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return vec![];
    };
    for ent in dir.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(map) = std::fs::read_to_string(ent.path().join("uid_map")) else {
            continue;
        };
        let extents = pool_extents(&map, pool);
        if extents.is_empty() {
            continue;
        }
        let (Ok(ns), Some(start)) = (
            std::fs::metadata(ent.path().join("ns/user")),
            live.start_time(pid),
        ) else {
            continue;
        };
        if Some(ns.ino()) == own {
            continue;
        }
        match seen.iter_mut().find(|s| s.ino == ns.ino()) {
            Some(s) if start < s.start => (s.pid, s.start) = (pid, start),
            Some(_) => {}
            None => seen.push(Seen {
                ino: ns.ino(),
                pid,
                start,
                extents,
            }),
        }
    }
    let mut candidates: Vec<(u32, u32, &Seen, usize)> = seen
        .iter()
        .flat_map(|s| {
            s.extents
                .iter()
                .enumerate()
                .map(move |(n, &(b, l))| (b, l, s, n))
        })
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.1));
    let mut out: Vec<LeaseEntry> = Vec::new();
    for (host_base, size, s, n) in candidates {
        if out
            .iter()
            .any(|e| overlaps(host_base, size, e.lease.host_base, e.lease.size))
        {
            continue;
        }
        let index = (host_base - pool.base) / pool.size;
        let Some(owner) = live.owner(s.pid).filter(|o| o.start_time == s.start) else {
            continue;
        };
        out.push(LeaseEntry {
            sandbox_id: format!("recovered-{}-{n}", s.ino),
            lease: Lease {
                host_base,
                size,
                index,
            },
            owner,
        });
    }
    out
}

/// Extents of a uid_map (as read from the initial namespace: host ids are
/// global) that overlap the pool, clamped to it.
pub(super) fn pool_extents(map: &str, pool: Pool) -> Vec<(u32, u32)> {
    map.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace().map(|x| x.parse::<u64>().ok());
            let (_inside, host, len) = (f.next()??, f.next()??, f.next()??);
            let start = host.max(pool.base as u64);
            let end = (host + len).min(pool.end());
            (start < end).then(|| (start as u32, (end - start) as u32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_clamped_to_the_pool() {
        let pool = Pool {
            base: 1000,
            size: 100,
            count: 10,
        };
        assert_eq!(pool_extents("0 0 4294967295\n", pool), vec![(1000, 1000)]);
        assert_eq!(
            pool_extents("0 1200 100\n0 5000 10\n", pool),
            vec![(1200, 100)]
        );
        assert_eq!(pool_extents("0 1950 100\n", pool), vec![(1950, 50)]);
        assert!(pool_extents("garbage\n", pool).is_empty());
    }
}
