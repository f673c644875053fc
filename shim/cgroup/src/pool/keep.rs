//! Reuse inside one parent that is not long-lived, such as a Kubernetes
//! pod's cgroup (v1 only: it needs rename). The pod's shim keeps the cgroup
//! of a container that exited while another container of the same shim
//! (the pod sandbox) is still in the parent, and gives it to the pod's next
//! container: init container -> app container, and every restart.
//!
//! * **keep** (1 rename): reset the limits, then rename the cgroup in the
//!   leader hierarchy to `.rund-pool~k-<pid>-<name>`. The followers keep
//!   `<name>`; the marker tells whose they are.
//! * **claim** (one rename per hierarchy): followers `<name>` -> `<new>`
//!   first, the leader marker last, so a crash in between leaves the marker
//!   and the rest can be found.
//! * **drain**: when the shim's last container in the parent goes, its kept
//!   cgroups are removed (followers first, marker last), so the kubelet's
//!   rmdir of the pod cgroup succeeds. A dead shim's markers are drained by
//!   the next destroy in that parent (`shim delete`) and by `rund pool gc`.
//!
//! Only the owning process claims its kept cgroups, so there is no race on
//! them between shims; the per-parent state is in memory, and the markers
//! in the tree are the crash-safe record.

use super::{Claim, Pool, Released};
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use crate::hierarchy::{Hierarchy, V1Hierarchy};
use crate::path::CgroupPath;
use crate::{ctl, tree};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Leader name of a kept cgroup: `<prefix><pid hex>-<container name>`.
pub(crate) const KEPT_PREFIX: &str = ".rund-pool~k-";

/// This process's containers and kept cgroups in one parent.
#[derive(Debug, Default)]
struct Local {
    live: usize,
    /// Keeps whose reset is running (the drain waits for them).
    keeping: usize,
    kept: Vec<String>,
}

/// Per-process state of the parents this process has containers in.
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    parents: Mutex<HashMap<PathBuf, Local>>,
}

pub(crate) fn kept_name(pid: u32, name: &str) -> Option<String> {
    let n = format!("{KEPT_PREFIX}{pid:x}-{name}");
    (n.len() <= 255).then_some(n)
}

/// `(pid, container name)` of a kept marker.
pub(crate) fn parse_kept(n: &str) -> Option<(i32, &str)> {
    let rest = n.strip_prefix(KEPT_PREFIX)?;
    let (pid, name) = rest.split_once('-')?;
    Some((i32::from_str_radix(pid, 16).ok()?, name))
}

pub(crate) fn pid_alive(pid: i32) -> bool {
    // Signal 0 only checks existence; EPERM still means it exists.
    pid > 0
        && !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::Error::ESRCH)
        )
}

fn me() -> u32 {
    std::process::id()
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn hierarchies(h: &Hierarchy) -> &[V1Hierarchy] {
    match h {
        Hierarchy::V1 { hierarchies, .. } => hierarchies,
        Hierarchy::V2 { .. } => &[],
    }
}

impl Pool {
    fn with_local<T>(&self, parent: &Path, f: impl FnOnce(&mut Local) -> T) -> T {
        let mut g = self
            .keeper
            .parents
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let s = g.entry(parent.to_path_buf()).or_default();
        let out = f(s);
        if s.live == 0 && s.keeping == 0 && s.kept.is_empty() {
            g.remove(parent);
        }
        out
    }

    /// A container of this process enters `parent`. In a parent that is
    /// not long-lived, returns a kept cgroup to claim (its own name first).
    pub(crate) fn enter(&self, parent: &Path, name: &str, long_lived: bool) -> Option<String> {
        self.with_local(parent, |s| {
            s.live += 1;
            if long_lived {
                return None;
            }
            let i = s
                .kept
                .iter()
                .position(|k| k == name)
                .or(s.kept.len().checked_sub(1))?;
            Some(s.kept.remove(i))
        })
    }

    /// A counted container left without a release here (its cgroup was
    /// gone, or went back to a long-lived parent's slots). The last one out
    /// drains the parent, unless it is long-lived (nothing is kept there).
    pub(crate) fn leave(&self, parent: &Path, long_lived: bool) {
        let drain = self.with_local(parent, |s| {
            s.live = s.live.saturating_sub(1);
            (s.live == 0 && s.keeping == 0).then(|| std::mem::take(&mut s.kept))
        });
        if let Some(kept) = drain.filter(|_| !long_lived) {
            self.drain(parent, &kept);
        }
    }

    /// Claim the kept cgroup of container `old` for `path`. On failure the
    /// kept cgroup is removed and the caller makes a fresh one.
    pub(crate) fn claim_kept(&self, path: &CgroupPath, old: &str) -> Result<Claim> {
        let fs = self.fs.as_ref();
        let parent = path.parent();
        let dirs = Dirs::of(&self.hier, &path.rel());
        let Dirs::V1(list) = &dirs else {
            return Err(Error::Unimplemented(
                "keeping a cgroup needs cgroup v1".into(),
            ));
        };
        let marker = kept_name(me(), old).unwrap_or_default();
        let mut devices_baseline = true;
        let mut moved: Vec<PathBuf> = Vec::new();
        let mut step = |from: &Path, to: &Path, h: &V1Hierarchy| -> Result<()> {
            if from != to {
                match fs.rename(from, to) {
                    Ok(()) => {}
                    // Gone (gc, crash): make this one instead.
                    Err(e) if errno(&e) == libc::ENOENT => {
                        tree::mkdir_one(fs, to, h.has("cpuset"))?;
                        devices_baseline &= !h.has("devices");
                    }
                    Err(e) if matches!(errno(&e), libc::EEXIST | libc::ENOTEMPTY) => {
                        return Err(Error::AlreadyExists(to.to_path_buf()))
                    }
                    Err(e) => return Err(Error::io("rename", from, e)),
                }
            }
            moved.push(to.to_path_buf());
            Ok(())
        };
        let mut r = Ok(());
        for (h, to) in list.iter().skip(1) {
            r = step(&h.mount.join(&parent).join(old), to, h);
            if r.is_err() {
                break;
            }
        }
        if r.is_ok() {
            let (h, to) = &list[0];
            r = step(&h.mount.join(&parent).join(&marker), to, h);
        }
        match r {
            Ok(()) => Ok(Claim {
                dirs,
                devices_baseline,
            }),
            Err(e) => {
                for d in moved.iter().rev() {
                    let _ = tree::rmdir_retry(fs, d);
                }
                drain_one(fs, &self.hier, &parent, &marker, old);
                Err(e)
            }
        }
    }

    /// Release a container's cgroup in a parent that is not long-lived:
    /// keep it while another container of this process is in the parent,
    /// else remove it and drain the parent's kept cgroups.
    pub(crate) fn release_local(
        &self,
        path: &CgroupPath,
        dirs: &Dirs,
        counted: bool,
    ) -> Result<Released> {
        let fs = self.fs.as_ref();
        let parent = path.parent();
        let marker = kept_name(me(), path.name());
        let keep = self.with_local(&parent, |s| {
            if counted {
                s.live = s.live.saturating_sub(1);
            }
            let keep = s.live > 0 && marker.is_some() && matches!(dirs, Dirs::V1(_));
            s.keeping += usize::from(keep);
            keep
        });
        let reset = keep && {
            let r = super::reset::v1(fs, dirs);
            if let Err(e) = &r {
                tracing::warn!(%e, "cannot reset limits; removing the cgroup instead");
            }
            r.is_ok()
        };
        // Decide and rename under the lock, so a concurrent last release
        // drains after this keep, never before it.
        let (res, drain) = {
            let mut g = self
                .keeper
                .parents
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let s = g.entry(parent.clone()).or_default();
            s.keeping -= usize::from(keep);
            let mut res = None;
            if reset && s.live > 0 {
                let leader = dirs.all()[0].to_path_buf();
                let to = leader.with_file_name(marker.as_deref().unwrap_or_default());
                match fs.rename(&leader, &to) {
                    Ok(()) => {
                        s.kept.push(path.name().to_string());
                        res = Some(Ok(Released::Kept));
                    }
                    Err(e) => tracing::warn!(%e, "cannot keep the cgroup; removing it"),
                }
            }
            let drain = (s.live == 0 && s.keeping == 0).then(|| std::mem::take(&mut s.kept));
            if s.live == 0 && s.keeping == 0 && s.kept.is_empty() {
                g.remove(&parent);
            }
            (res, drain)
        };
        let res = res.unwrap_or_else(|| {
            tree::remove_reclaiming(fs, dirs, self.cfg.reclaim_on_remove)
                .map(|()| Released::Removed)
        });
        if let Some(kept) = drain {
            self.drain(&parent, &kept);
        }
        res
    }

    /// Remove this process's kept cgroups in `parent`, and any whose
    /// process is dead (a crashed shim's).
    fn drain(&self, parent: &Path, kept: &[String]) {
        let fs = self.fs.as_ref();
        for name in kept {
            let marker = kept_name(me(), name).unwrap_or_default();
            drain_one(fs, &self.hier, parent, &marker, name);
        }
        self.drain_dead(parent);
    }

    /// Drain the kept cgroups of dead processes in `parent`.
    pub(crate) fn drain_dead(&self, parent: &Path) -> usize {
        let fs = self.fs.as_ref();
        let Some(leader) = hierarchies(&self.hier).first() else {
            return 0;
        };
        let mut n = 0;
        for m in fs.subdirs(&leader.mount.join(parent)).unwrap_or_default() {
            if let Some((pid, name)) = parse_kept(&m) {
                if !pid_alive(pid) {
                    n += drain_one(fs, &self.hier, parent, &m, name);
                }
            }
        }
        n
    }

    /// Whether `name` in `parent` is another live process's kept cgroup
    /// (the followers carry its name, but it is no container).
    pub(crate) fn kept_elsewhere(&self, parent: &Path, name: &str) -> bool {
        let Some(leader) = hierarchies(&self.hier).first() else {
            return false;
        };
        self.fs
            .subdirs(&leader.mount.join(parent))
            .unwrap_or_default()
            .iter()
            .filter_map(|m| parse_kept(m))
            .any(|(pid, n)| n == name && pid_alive(pid))
    }
}

/// Remove one kept cgroup: followers first, the leader marker last.
/// Returns the number of directories removed.
pub(crate) fn drain_one(
    fs: &dyn CgroupFs,
    hier: &Hierarchy,
    parent: &Path,
    marker: &str,
    name: &str,
) -> usize {
    let hs = hierarchies(hier);
    let Some(leader) = hs.first() else {
        return 0;
    };
    let mut n = 0;
    let mut rm = |d: &Path| match tree::rmdir_if_present(fs, d) {
        Ok(true) => n += 1,
        Ok(false) => {}
        Err(e) => tracing::warn!(%e, "cannot remove a kept cgroup"),
    };
    for h in &hs[1..] {
        let d = h.mount.join(parent).join(name);
        // A follower with processes is not ours to remove (a new container
        // of that name adopted it after a crash): leave it.
        if ctl::procs(fs, &d).is_ok_and(|p| !p.is_empty()) {
            continue;
        }
        rm(&d);
    }
    // The marker goes last, so a crash above leaves it for gc.
    rm(&leader.mount.join(parent).join(marker));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_names() {
        let m = kept_name(0x1f, "abc").unwrap();
        assert_eq!(m, ".rund-pool~k-1f-abc");
        assert_eq!(parse_kept(&m), Some((0x1f, "abc")));
        assert_eq!(parse_kept(".rund-pool~k-zz-abc"), None);
        assert!(kept_name(1, &"x".repeat(250)).is_none());
        assert!(m.starts_with(crate::path::RESERVED_PREFIX));
        assert!(!m.starts_with(crate::path::SLOT_PREFIX));
    }
}
