//! Creating and removing cgroup directories in every hierarchy.

use crate::ctl;
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use crate::hierarchy::Hierarchy;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Make a new v1 cpuset usable: it starts with empty cpus/mems.
pub(crate) fn init_cpuset(fs: &dyn CgroupFs, dir: &Path) -> Result<()> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if ctl::read(fs, dir, file)?.trim().is_empty() {
            let v = ctl::read(fs, parent, file)?;
            ctl::write(fs, dir, file, v.trim())?;
        }
    }
    Ok(())
}

/// On v2, let `dir`'s children use every controller `dir` has.
pub(crate) fn delegate_v2(fs: &dyn CgroupFs, dir: &Path) -> Result<()> {
    let have = ctl::read(fs, dir, "cgroup.controllers").unwrap_or_default();
    let on = ctl::read(fs, dir, "cgroup.subtree_control").unwrap_or_default();
    for c in have.split_whitespace() {
        if !on.split_whitespace().any(|x| x == c) {
            // One at a time: a controller the kernel refuses must not block the rest.
            if let Err(e) = ctl::write(fs, dir, "cgroup.subtree_control", &format!("+{c}")) {
                tracing::debug!(%e, "cannot delegate controller");
            }
        }
    }
    Ok(())
}

/// mkdir that tolerates EEXIST and prepares the new directory.
pub(crate) fn mkdir_one(fs: &dyn CgroupFs, dir: &Path, cpuset: bool) -> Result<bool> {
    match fs.mkdir(dir) {
        Ok(()) => {
            if cpuset {
                init_cpuset(fs, dir)?;
            }
            Ok(true)
        }
        Err(e) if errno(&e) == libc::EEXIST => {
            // Another shim may have made it a moment ago and not yet filled
            // its cpuset: a child copied from it would be unusable (ENOSPC).
            if cpuset {
                init_cpuset(fs, dir)?;
            }
            Ok(false)
        }
        Err(e) => Err(Error::io("mkdir", dir, e)),
    }
}

/// Create `rel` and its missing ancestors in every hierarchy (shared parents
/// such as `default` are left in place later: other containers use them).
pub(crate) fn mkdir_parents(fs: &dyn CgroupFs, h: &Hierarchy, rel: &Path) -> Result<()> {
    match h {
        Hierarchy::V1 { hierarchies, .. } => {
            for x in hierarchies {
                let mut cur = x.mount.clone();
                for comp in rel.components() {
                    cur.push(comp);
                    if !fs.exists(&cur) {
                        mkdir_one(fs, &cur, x.has("cpuset"))?;
                    } else if x.has("cpuset") {
                        init_cpuset(fs, &cur)?;
                    }
                }
            }
        }
        Hierarchy::V2 { root } => {
            let mut cur = root.clone();
            delegate_v2(fs, &cur)?;
            for comp in rel.components() {
                cur.push(comp);
                if !fs.exists(&cur) {
                    mkdir_one(fs, &cur, false)?;
                }
                delegate_v2(fs, &cur)?;
            }
        }
    }
    Ok(())
}

/// Create the leaf cgroup `rel` everywhere with plain mkdir (the pool-off
/// path). An existing empty leftover is adopted; a busy one is an error.
/// On error everything created here is removed again.
pub(crate) fn create_leaf(fs: &dyn CgroupFs, h: &Hierarchy, rel: &Path) -> Result<Dirs> {
    if let Some(parent) = rel.parent() {
        mkdir_parents(fs, h, parent)?;
    }
    let dirs = Dirs::of(h, rel);
    let cpuset_dir = dirs.v1("cpuset").map(Path::to_path_buf);
    let mut made: Vec<PathBuf> = Vec::new();
    for d in dirs.all() {
        let r = mkdir_one(fs, d, Some(d) == cpuset_dir.as_deref()).and_then(|new| {
            if !new && !ctl::procs(fs, d)?.is_empty() {
                return Err(Error::AlreadyExists(d.to_path_buf()));
            }
            Ok(())
        });
        match r {
            Ok(()) => made.push(d.to_path_buf()),
            Err(e) => {
                for m in made.iter().rev() {
                    let _ = fs.rmdir(m);
                }
                return Err(e);
            }
        }
    }
    Ok(dirs)
}

/// Wait until no process is left in any directory of `dirs`.
pub(crate) fn wait_empty(fs: &dyn CgroupFs, dirs: &Dirs, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let mut busy: Option<(PathBuf, usize)> = None;
        for d in dirs.all() {
            match ctl::procs(fs, d) {
                Ok(p) if !p.is_empty() => {
                    busy = Some((d.to_path_buf(), p.len()));
                    break;
                }
                Ok(_) => {}
                // Already gone in this hierarchy: nothing to wait for.
                Err(Error::Io { source, .. }) if errno(&source) == libc::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        let Some((path, count)) = busy else {
            return Ok(());
        };
        if start.elapsed() >= timeout {
            return Err(Error::NotEmpty {
                path,
                count,
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// rmdir in every hierarchy; ENOENT counts as done. EBUSY is retried briefly
/// (exiting tasks can keep a cgroup busy for a moment after cgroup.procs empties).
pub(crate) fn remove(fs: &dyn CgroupFs, dirs: &Dirs) -> Result<()> {
    let mut first_err = None;
    for d in dirs.all() {
        if let Err(e) = rmdir_retry(fs, d) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

pub(crate) fn rmdir_retry(fs: &dyn CgroupFs, d: &Path) -> Result<()> {
    rmdir_if_present(fs, d).map(drop)
}

/// [`rmdir_retry`] that tells whether there was a directory to remove.
pub(crate) fn rmdir_if_present(fs: &dyn CgroupFs, d: &Path) -> Result<bool> {
    let mut tries = 0;
    loop {
        match fs.rmdir(d) {
            Ok(()) => return Ok(true),
            Err(e) if errno(&e) == libc::ENOENT => return Ok(false),
            Err(e) if errno(&e) == libc::EBUSY && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(Error::io("rmdir", d, e)),
        }
    }
}

/// Ask the kernel to reclaim a cgroup's memory before it is removed, so
/// its page cache does not keep a dying memory cgroup alive: v2
/// `memory.reclaim` (kernel >= 5.19), v1 `memory.force_empty`. Best effort:
/// the kernel answers EAGAIN when it could not reclaim everything.
pub(crate) fn reclaim(fs: &dyn CgroupFs, dirs: &Dirs) {
    let r = match dirs {
        Dirs::V1(_) => match dirs.v1("memory") {
            Some(d) => ctl::write_if_exists(fs, d, "memory.force_empty", "0").map(drop),
            None => Ok(()),
        },
        Dirs::V2(d) => match ctl::read_u64_opt(fs, d, "memory.current") {
            Ok(Some(cur)) if cur > 0 => {
                ctl::write_if_exists(fs, d, "memory.reclaim", &cur.to_string()).map(drop)
            }
            _ => Ok(()),
        },
    };
    if let Err(e) = r {
        tracing::debug!(%e, "memory reclaim before rmdir");
    }
}

/// [`remove`], reclaiming memory first when asked.
pub(crate) fn remove_reclaiming(fs: &dyn CgroupFs, dirs: &Dirs, reclaim_first: bool) -> Result<()> {
    if reclaim_first {
        reclaim(fs, dirs);
    }
    remove(fs, dirs)
}

/// Whether host `pid` is in the v2 cgroup `dir`: `/proc/<pid>/cgroup` names
/// a path below the cgroup2 mount, and `dir` must be that mount plus that
/// path (the mount is where the cgroup2 filesystem starts). Any doubt
/// (another cgroup namespace, a fake tree) answers false.
pub(crate) fn in_cgroup_v2(dir: &Path, pid: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    let Some(rel) = text.lines().find_map(|l| l.strip_prefix("0::")) else {
        return false;
    };
    let rel = Path::new(rel.trim_start_matches('/'));
    let depth = rel.components().count();
    let mut mount = dir.to_path_buf();
    for _ in 0..depth {
        if !mount.pop() {
            return false;
        }
    }
    if mount.join(rel) != dir {
        return false;
    }
    let is_cgroup2 = |p: &Path| {
        nix::sys::statfs::statfs(p)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    is_cgroup2(&mount) && mount.parent().is_some_and(|p| !is_cgroup2(p))
}
