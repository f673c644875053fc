//! The host's cgroup layout, remembered across shims. Each per-pod shim
//! would otherwise read /proc/self/mountinfo, and every 4 kB read of it
//! takes the kernel's global mount lock (`namespace_sem`) behind each
//! mount and mount namespace being made: in a burst of starts that wait
//! was hundreds of ms on the Create path.
//!
//! The record is checked, not trusted: /proc/self/cgroup (which takes no
//! mount lock) must list the same hierarchies, and each mount point must
//! still be the same filesystem (`st_dev`). Anything else, or any error,
//! reads mountinfo as before and rewrites the record.

use crate::error::Result;
use crate::hierarchy::{Hierarchy, V1Hierarchy};
use serde::{Deserialize, Serialize};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The record's name in the pool's state dir (not a parent's state).
pub(crate) const FILE: &str = ".layout.json";

/// Where the layout is read from (a seam for tests).
pub(crate) trait Source {
    fn mountinfo(&self) -> io::Result<String>;
    fn proc_cgroup(&self) -> io::Result<String>;
    fn dev_of(&self, path: &Path) -> Option<u64>;
}

pub(crate) struct Host;

impl Source for Host {
    fn mountinfo(&self) -> io::Result<String> {
        std::fs::read_to_string("/proc/self/mountinfo")
    }
    fn proc_cgroup(&self) -> io::Result<String> {
        std::fs::read_to_string("/proc/self/cgroup")
    }
    fn dev_of(&self, path: &Path) -> Option<u64> {
        std::fs::metadata(path).ok().map(|m| m.dev())
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Record {
    /// The controller lists of /proc/self/cgroup, sorted.
    hierarchies: Vec<String>,
    /// `(controllers, mount point, st_dev)` per v1 hierarchy.
    v1: Vec<(Vec<String>, PathBuf, u64)>,
    /// The hybrid's cgroup2 mount, or the v2 root.
    v2: Option<(PathBuf, u64)>,
}

/// The hierarchies the kernel lists for this process: one per line of
/// /proc/self/cgroup (`id:controllers:path`; v2's is `0::path`).
fn listed(proc_cgroup: &str) -> Vec<String> {
    let mut v: Vec<String> = proc_cgroup
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(str::to_string))
        .collect();
    v.sort();
    v
}

fn record_of(h: &Hierarchy, hierarchies: Vec<String>, src: &dyn Source) -> Option<Record> {
    let with_dev = |p: &Path| src.dev_of(p).map(|d| (p.to_path_buf(), d));
    let (v1, v2) = match h {
        Hierarchy::V1 {
            hierarchies: hs,
            unified,
        } => {
            let v1 = hs
                .iter()
                .map(|h| {
                    Some((
                        h.controllers.clone(),
                        h.mount.clone(),
                        src.dev_of(&h.mount)?,
                    ))
                })
                .collect::<Option<Vec<_>>>()?;
            let v2 = match unified {
                Some(u) => Some(with_dev(u)?),
                None => None,
            };
            (v1, v2)
        }
        Hierarchy::V2 { root } => (Vec::new(), Some(with_dev(root)?)),
    };
    Some(Record {
        hierarchies,
        v1,
        v2,
    })
}

/// The layout in `rec` if it still holds on this host.
fn still_holds(rec: Record, hierarchies: &[String], src: &dyn Source) -> Option<Hierarchy> {
    if rec.hierarchies != hierarchies {
        return None;
    }
    let same = |p: &Path, dev: u64| src.dev_of(p) == Some(dev);
    if !rec.v1.iter().all(|(_, p, d)| same(p, *d)) {
        return None;
    }
    if let Some((p, d)) = &rec.v2 {
        if !same(p, *d) {
            return None;
        }
    }
    if rec.v1.is_empty() {
        let (root, _) = rec.v2?;
        return Some(Hierarchy::V2 { root });
    }
    Some(Hierarchy::V1 {
        hierarchies: rec
            .v1
            .into_iter()
            .map(|(controllers, mount, _)| V1Hierarchy { controllers, mount })
            .collect(),
        unified: rec.v2.map(|(p, _)| p),
    })
}

/// The layout, from the record in `dir` when it still holds, else from
/// mountinfo (and the record is rewritten; failing to write it is not an
/// error).
pub(crate) fn detect(dir: &Path, src: &dyn Source) -> Result<Hierarchy> {
    let file = dir.join(FILE);
    let hierarchies = src.proc_cgroup().map(|t| listed(&t)).ok();
    if let Some(hs) = &hierarchies {
        let rec = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok());
        if let Some(h) = rec.and_then(|r| still_holds(r, hs, src)) {
            return Ok(h);
        }
    }
    let h = Hierarchy::from_mountinfo(
        &src.mountinfo()
            .map_err(|e| crate::Error::io("read", "/proc/self/mountinfo", e))?,
    )?;
    if let Some(rec) = hierarchies.and_then(|hs| record_of(&h, hs, src)) {
        if let Err(e) = write(dir, &file, &rec) {
            tracing::debug!(%e, path = %file.display(), "cgroup layout not remembered");
        }
    }
    Ok(h)
}

/// Written in place with one write(2): a reader that sees it empty or torn
/// (a writer killed midway) only falls back to mountinfo and rewrites it,
/// and no temporary file can be left behind by a killed shim.
fn write(dir: &Path, file: &Path, rec: &Record) -> io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let bytes = serde_json::to_vec(rec).map_err(io::Error::other)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(file)?
        .write_all(&bytes)
}

#[cfg(test)]
#[path = "layout_cache_tests.rs"]
mod tests;
