//! The cgroup pool (RunD's lesson), cgroup v1 only: a cgroup is handed to a
//! container by rename, so the container still gets its exact path. v2
//! refuses rename, so there is no pool on v2.
//!
//! Two ways a container's cgroup comes from the pool:
//! * **shared slots** (`v1.rs`) under the long-lived parents (config
//!   `pool_parents`, default `/default`, or `rund pool warm`): empty
//!   cgroups made in batches, claimed by rename in the *leader* hierarchy
//!   (whoever wins that rename owns the slot everywhere), recycled on delete;
//! * **kept cgroups** (`keep.rs`) inside any other parent, such as a pod's
//!   cgroup: the cgroup of a container that exited serves the same shim's
//!   next container in that parent. Such a parent is never batch-filled.
//!
//! `gc.rs` removes what a crash left behind, and the state of parents that
//! are gone.

mod config;
mod gc;
mod keep;
mod recycling;
mod refiller;
pub(crate) mod reset;
mod state;
mod v1;

pub use config::{CgroupConfig, Switch};
pub use recycling::{PendingRecycle, Releasing};
pub use state::Counters;

use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use crate::hierarchy::Hierarchy;
use crate::path::{CgroupPath, SLOT_PREFIX};
use serde::Serialize;
use state::{Meta, ParentState};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One line of `rund pool status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// The parent, relative to the hierarchy roots.
    pub parent: PathBuf,
    /// Listed in `[cgroup] pool_parents` (else warmed).
    pub configured: bool,
    /// Complete slots ready to claim.
    pub free: usize,
    /// The parent's non-slot children (containers).
    pub claimed: usize,
    pub counters: Counters,
}

/// What gc did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Long-lived parents looked at.
    pub parents: usize,
    /// Cgroup directories removed.
    pub removed: usize,
    /// State dirs removed (their parent is gone or no longer pooled).
    pub states_removed: usize,
}

/// A cgroup taken from the pool.
#[derive(Debug)]
pub struct Claim {
    pub dirs: Dirs,
    /// v1: the devices cgroup holds the baseline (deny all, then the
    /// defaults), so create only writes the rules beyond it.
    pub devices_baseline: bool,
}

/// How a released cgroup ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Back among the shared slots of a long-lived parent.
    Recycled,
    /// Kept for this shim's next container in the same parent.
    Kept,
    Removed,
}

/// The pool. One per shim process; processes share the shared slots
/// through the cgroup tree and the state dir.
#[derive(Debug)]
pub struct Pool {
    pub(crate) hier: Hierarchy,
    pub(crate) fs: Arc<dyn CgroupFs>,
    pub(crate) cfg: CgroupConfig,
    configured: Vec<PathBuf>,
    keeper: keep::Keeper,
    refiller: Mutex<refiller::Lazy>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// pid + time + counter: unique across processes without a lock.
pub(crate) fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{:x}-{:x}-{:x}",
        std::process::id(),
        nanos,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Where a claimer starts in the free list: the pid alone puts threads of
/// one process (and shims with close pids) on the same first slot.
pub(crate) fn spread(name: &str) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(name.as_bytes());
    h.write_u32(std::process::id());
    h.finish() as usize
}

pub(crate) fn new_slot_name() -> String {
    format!("{SLOT_PREFIX}{}", unique_suffix())
}

pub(crate) fn is_slot(name: &str) -> bool {
    name.starts_with(SLOT_PREFIX)
}

fn v2_refused() -> Error {
    Error::Unimplemented(
        "the cgroup pool needs cgroup v1: the kernel refuses rename on cgroup v2, \
         so a pooled cgroup could not be at its container's exact path"
            .into(),
    )
}

impl Pool {
    pub fn new(hier: Hierarchy, fs: Arc<dyn CgroupFs>, cfg: CgroupConfig) -> Self {
        Pool {
            configured: cfg.parents_rel(),
            hier,
            fs,
            cfg,
            keeper: keep::Keeper::default(),
            refiller: Mutex::default(),
        }
    }

    pub fn config(&self) -> &CgroupConfig {
        &self.cfg
    }

    /// The leader's directory for `rel`.
    pub(crate) fn leader_dir(&self, rel: &Path) -> PathBuf {
        self.hier.roots()[0].join(rel)
    }

    pub(crate) fn state(&self, parent: &Path) -> Result<ParentState> {
        ParentState::open(&self.cfg.state_dir, &self.leader_dir(parent), parent)
    }

    /// What a killed writer left in `parent`'s pool state (its temp files).
    pub(crate) fn sweep_stale(&self, parent: &Path) {
        ParentState::sweep_stale_at(&self.cfg.state_dir, &self.leader_dir(parent));
    }

    /// Whether `parent` gets shared slots: configured, or warmed and still
    /// there.
    pub fn is_long_lived(&self, parent: &Path) -> bool {
        if self.configured.iter().any(|p| p == parent) {
            return true;
        }
        ParentState::existing(&self.cfg.state_dir, &self.leader_dir(parent))
            .and_then(|st| ParentState::meta(&st.dir).ok())
            .is_some_and(|m| m.warmed)
    }

    /// Free slot names under `parent` (complete slots: present in the leader).
    pub fn free_slots(&self, parent: &Path) -> Result<Vec<String>> {
        let dir = self.leader_dir(parent);
        match self.fs.subdirs(&dir) {
            Ok(v) => Ok(v.into_iter().filter(|n| is_slot(n)).collect()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Vec::new()),
            Err(e) => Err(Error::io("readdir", dir, e)),
        }
    }

    /// Claim a shared slot of a long-lived parent: `Ok(None)` when there is
    /// none (the caller then makes the cgroup). Asks the refiller to top up
    /// once fewer than `low` free slots remain (waking it on every claim
    /// would compete with the starts for CPU).
    pub fn claim(&self, path: &CgroupPath) -> Result<Option<Claim>> {
        if self.hier.is_v2() {
            return Ok(None);
        }
        let (got, seen) = v1::claim(self, path)?;
        if seen <= self.cfg.low {
            self.request_refill(&path.parent());
        }
        Ok(got)
    }

    /// Give back an empty cgroup (the caller waited for it to empty):
    /// recycled into a long-lived parent's slots, kept for this process's
    /// next container in the parent, or removed. `counted`: the container
    /// was created by this process (not loaded). A recycle returns once the
    /// cgroup has left its path: the caller finishes the returned
    /// [`PendingRecycle`] when it likes (after its reply).
    pub fn release_detached(
        self: &Arc<Self>,
        path: &CgroupPath,
        dirs: &Dirs,
        counted: bool,
    ) -> Result<Releasing> {
        let parent = path.parent();
        if self.hier.is_v2() || !self.is_long_lived(&parent) {
            return self.release_local(path, dirs, counted).map(Releasing::Done);
        }
        if counted {
            self.leave(&parent, true);
        }
        Ok(match v1::detach(self, path, dirs)? {
            v1::Detach::Done(r) => Releasing::Done(r),
            v1::Detach::Detached(d) => Releasing::Pending(PendingRecycle::new(self.clone(), d)),
        })
    }

    /// Top up a long-lived `parent` below the low water mark. Returns the
    /// number of slots made (0 if another process holds the refill lock).
    pub fn refill(&self, parent: &Path) -> Result<usize> {
        if self.hier.is_v2() || !self.is_long_lived(parent) {
            return Ok(0);
        }
        let st = self.state(parent)?;
        let Some(_lock) = st.try_refill_lock()? else {
            return Ok(0);
        };
        self.gc_parent_locked(parent, false)?;
        let free = self.free_slots(parent)?.len();
        if free >= self.cfg.low {
            return Ok(0);
        }
        let want = self.cfg.low.max(self.cfg.batch.min(self.cfg.high));
        self.fill_locked(&st, parent, free, want)
    }

    /// Fill `parent` up to `target` free slots (capped at high), waiting for
    /// the refill lock; the parent becomes long-lived until it is removed.
    pub fn warm(&self, parent: &Path, target: usize) -> Result<usize> {
        if self.hier.is_v2() {
            return Err(v2_refused());
        }
        let st = self.state(parent)?;
        if !self.configured.iter().any(|p| p == parent) {
            st.write_meta(&Meta {
                rel: parent.to_path_buf(),
                warmed: true,
            })?;
        }
        let _lock = st.refill_lock()?;
        self.gc_parent_locked(parent, false)?;
        let free = self.free_slots(parent)?.len();
        self.fill_locked(&st, parent, free, target.min(self.cfg.high))
    }

    fn fill_locked(
        &self,
        st: &ParentState,
        parent: &Path,
        free: usize,
        target: usize,
    ) -> Result<usize> {
        let mut made = 0;
        let mut res = Ok(());
        while free + made < target {
            let n = self.cfg.batch.max(1).min(target - free - made);
            match v1::make_slots(self, parent, n) {
                Ok(k) => made += k,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if made > 0 {
            st.bump(|c| {
                c.refills += 1;
                c.slots_created += made as u64;
            })?;
        }
        res.map(|()| made)
    }

    /// Remove stale pieces of a long-lived `parent`'s pool and slots past
    /// high water (caller holds the refill lock). `drain` removes every
    /// free slot.
    fn gc_parent_locked(&self, parent: &Path, drain: bool) -> Result<usize> {
        let keep = if drain { 0 } else { self.cfg.high };
        let n = v1::gc(self, parent, keep)?;
        if n > 0 {
            self.state(parent)?.bump(|c| c.gc_removed += n as u64)?;
        }
        Ok(n)
    }

    /// The parents with a state dir on this node under this tree's root.
    pub(crate) fn state_parents(&self) -> Vec<(PathBuf, ParentState)> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.cfg.state_dir) else {
            return out;
        };
        for e in rd.flatten() {
            if let Ok(meta) = ParentState::meta(&e.path()) {
                // Another root (e.g. a test tree) shares the state dir: skip it.
                let want = ParentState::existing(&self.cfg.state_dir, &self.leader_dir(&meta.rel));
                if want.is_some_and(|s| s.dir == e.path()) {
                    out.push((meta.rel, ParentState { dir: e.path() }));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The long-lived parents that have a pool on this node.
    pub fn parents(&self) -> Result<Vec<PathBuf>> {
        Ok(self
            .state_parents()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| self.is_long_lived(p) && self.fs.exists(&self.leader_dir(p)))
            .collect())
    }

    /// `rund pool status`.
    pub fn status(&self) -> Result<Vec<PoolStatus>> {
        let mut out = Vec::new();
        if self.hier.is_v2() {
            return Ok(out);
        }
        for parent in self.parents()? {
            let st = self.state(&parent)?;
            let free = self.free_slots(&parent)?.len();
            let claimed = self
                .fs
                .subdirs(&self.leader_dir(&parent))
                .map(|v| {
                    v.iter()
                        .filter(|n| !n.starts_with(crate::path::RESERVED_PREFIX))
                        .count()
                })
                .unwrap_or(0);
            out.push(PoolStatus {
                configured: self.configured.contains(&parent),
                parent,
                free,
                claimed,
                counters: st.counters(),
            });
        }
        Ok(out)
    }

    /// `rund pool gc`: in long-lived parents, half-made and orphaned slots
    /// and slots past high water (with `drain`, every free slot); the kept
    /// cgroups of dead shims anywhere; and the slots and state of parents
    /// that are gone or no longer pooled (v2: every one).
    pub fn gc(&self, drain: bool) -> Result<GcReport> {
        let mut rep = GcReport::default();
        for (parent, st) in self.state_parents() {
            let exists = self.fs.exists(&self.leader_dir(&parent));
            if self.hier.is_v2() || !exists || !self.is_long_lived(&parent) {
                let _lock = st.refill_lock()?;
                if exists {
                    rep.removed += gc::drain_parent(self, &parent);
                }
                st.remove()?;
                rep.states_removed += 1;
                continue;
            }
            let _lock = st.refill_lock()?;
            rep.parents += 1;
            rep.removed += self.gc_parent_locked(&parent, drain)?;
        }
        rep.removed += gc::sweep_kept(self);
        Ok(rep)
    }

    /// Allow the background refiller (idempotent; v1 only). Its thread
    /// starts with the first refill request.
    pub fn start_refiller(self: &Arc<Self>) {
        if self.hier.is_v2() {
            return;
        }
        let mut g = self.refiller.lock().unwrap_or_else(|e| e.into_inner());
        g.arm(Arc::downgrade(self));
    }

    /// Ask the refiller to look at `parent` (no-op without a refiller).
    pub fn request_refill(&self, parent: &Path) {
        let mut g = self.refiller.lock().unwrap_or_else(|e| e.into_inner());
        g.request(parent);
    }

    /// Whether this process's refiller thread has been started.
    pub fn refiller_running(&self) -> bool {
        let g = self.refiller.lock().unwrap_or_else(|e| e.into_inner());
        g.handle().is_some()
    }

    /// Wait until the refiller has handled every request so far (tests).
    pub fn refiller_idle(&self) {
        let h = self
            .refiller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .handle()
            .cloned();
        if let Some(h) = h {
            h.wait_idle();
        }
    }
}
