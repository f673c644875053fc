//! The node-wide cgroup pool (RunD's lesson): empty cgroups made ahead of
//! time under the parent of a container's cgroupsPath, handed out by rename
//! (v1) or by an exclusive claim file (v2), and recycled on delete.
//!
//! v1 protocol, for one slot `.rund-pool-X` present in every hierarchy:
//! * **claim**: rename `X` to the container name in the *leader* hierarchy
//!   (the first by name). Whoever wins that rename owns X everywhere; the
//!   loser gets ENOENT and tries the next slot. The owner then renames X in
//!   the other hierarchies, which nobody else touches. No lock.
//! * **refill** (under `refill.lock`): mkdir X in the followers first and in
//!   the leader last, so a slot is claimable only once it is complete.
//! * **recycle**: reset limits, rename followers back first, leader last.
//! * **crash**: a crash in any of these leaves follower-only slots (no leader
//!   dir); refill and gc remove them. A claimer that finds a follower slot
//!   missing falls back to mkdir for that hierarchy.

mod refiller;
mod reset;
mod state;
mod v1;
mod v2;

pub use state::Counters;
pub(crate) use v2::mapped_slot;

use crate::dirs::Dirs;
use crate::error::Result;
use crate::fs::CgroupFs;
use crate::hierarchy::Hierarchy;
use crate::path::{CgroupPath, SLOT_PREFIX};
use serde::{Deserialize, Serialize};
use state::ParentState;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// `on` / `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    #[default]
    On,
    Off,
}

/// The `[cgroup]` section of rund's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupConfig {
    /// `cgroup.pool = on|off`.
    pub pool: Switch,
    /// Slots made per refill batch.
    pub batch: usize,
    /// Refill when fewer free slots than this remain.
    pub low: usize,
    /// Remove (rather than recycle) cgroups past this many free slots.
    pub high: usize,
    /// Lock, counter and mapping files.
    pub state_dir: PathBuf,
    /// How long destroy waits for the cgroup to empty.
    pub empty_timeout_ms: u64,
    /// How long freeze waits for the freezer to settle.
    pub freeze_timeout_ms: u64,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            pool: Switch::On,
            batch: 32,
            low: 16,
            high: 128,
            state_dir: PathBuf::from("/run/rund/cgroup-pool"),
            empty_timeout_ms: 5000,
            freeze_timeout_ms: 5000,
        }
    }
}

/// One line of `rund pool status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// The parent, relative to the hierarchy roots.
    pub parent: PathBuf,
    /// Complete slots ready to claim.
    pub free: usize,
    /// Slots in use by containers (v1: the parent's non-slot children).
    pub claimed: usize,
    pub counters: Counters,
}

/// What gc did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub parents: usize,
    pub removed: usize,
}

/// A claimed slot.
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
    Recycled,
    Removed,
}

/// The pool. One per shim process; processes share it through the cgroup
/// tree and the state dir.
#[derive(Debug)]
pub struct Pool {
    pub(crate) hier: Hierarchy,
    pub(crate) fs: Arc<dyn CgroupFs>,
    pub(crate) cfg: CgroupConfig,
    refiller: Mutex<Option<refiller::Handle>>,
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

impl Pool {
    pub fn new(hier: Hierarchy, fs: Arc<dyn CgroupFs>, cfg: CgroupConfig) -> Self {
        Pool {
            hier,
            fs,
            cfg,
            refiller: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &CgroupConfig {
        &self.cfg
    }

    /// The leader's directory for `rel` (v2: the one directory).
    pub(crate) fn leader_dir(&self, rel: &Path) -> PathBuf {
        self.hier.roots()[0].join(rel)
    }

    pub(crate) fn state(&self, parent: &Path) -> Result<ParentState> {
        ParentState::open(&self.cfg.state_dir, &self.leader_dir(parent), parent)
    }

    /// Free slot names under `parent` (complete slots: present in the leader).
    pub fn free_slots(&self, parent: &Path) -> Result<Vec<String>> {
        if self.hier.is_v2() {
            return v2::free_slots(self, parent);
        }
        let dir = self.leader_dir(parent);
        match self.fs.subdirs(&dir) {
            Ok(v) => Ok(v.into_iter().filter(|n| is_slot(n)).collect()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Vec::new()),
            Err(e) => Err(crate::error::Error::io("readdir", dir, e)),
        }
    }

    /// Claim a slot for `path`: `Ok(None)` when the pool has none free (the
    /// caller then falls back to mkdir). Asks the refiller to top up once
    /// fewer than `low` free slots remain (waking it on every claim would
    /// compete with the starts for CPU).
    pub fn claim(&self, path: &CgroupPath) -> Result<Option<Claim>> {
        let (got, seen) = if self.hier.is_v2() {
            v2::claim(self, path)?
        } else {
            v1::claim(self, path)?
        };
        if seen <= self.cfg.low {
            self.request_refill(&path.parent());
        }
        Ok(got)
    }

    /// Return an empty cgroup to the pool (or remove it past high water or
    /// when its limits cannot be reset). The caller waited for it to empty.
    pub fn release(&self, path: &CgroupPath, dirs: &Dirs) -> Result<Released> {
        if self.hier.is_v2() {
            v2::release(self, path, dirs)
        } else {
            v1::release(self, path, dirs)
        }
    }

    /// Top up `parent` if it is below the low water mark. Returns the number
    /// of slots made (0 if another process holds the refill lock).
    pub fn refill(&self, parent: &Path) -> Result<usize> {
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
    /// the refill lock. For tests, benches and a warm start.
    pub fn warm(&self, parent: &Path, target: usize) -> Result<usize> {
        let st = self.state(parent)?;
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
            let r = if self.hier.is_v2() {
                v2::make_slots(self, parent, n)
            } else {
                v1::make_slots(self, parent, n)
            };
            match r {
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

    /// Remove stale pieces of `parent`'s pool and slots past high water
    /// (caller holds the refill lock). `drain` removes every free slot.
    fn gc_parent_locked(&self, parent: &Path, drain: bool) -> Result<usize> {
        let keep = if drain { 0 } else { self.cfg.high };
        let n = if self.hier.is_v2() {
            v2::gc(self, parent, keep)?
        } else {
            v1::gc(self, parent, keep)?
        };
        if n > 0 {
            self.state(parent)?.bump(|c| c.gc_removed += n as u64)?;
        }
        Ok(n)
    }

    /// The parents this node has pools for (from the state dir).
    pub fn parents(&self) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.cfg.state_dir) else {
            return Ok(out);
        };
        for e in rd.flatten() {
            if let Ok(meta) = ParentState::meta(&e.path()) {
                // Another root (e.g. a test tree) shares the state dir: skip it.
                let st = self.state(&meta.rel)?;
                if st.dir == e.path() {
                    out.push(meta.rel);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// `rund pool status`.
    pub fn status(&self) -> Result<Vec<PoolStatus>> {
        let mut out = Vec::new();
        for parent in self.parents()? {
            let st = self.state(&parent)?;
            let free = self.free_slots(&parent)?.len();
            let claimed = if self.hier.is_v2() {
                v2::claimed_count(&st)
            } else {
                let dir = self.leader_dir(&parent);
                self.fs
                    .subdirs(&dir)
                    .map(|v| v.iter().filter(|n| !is_slot(n)).count())
                    .unwrap_or(0)
            };
            out.push(PoolStatus {
                parent,
                free,
                claimed,
                counters: st.counters(),
            });
        }
        Ok(out)
    }

    /// `rund pool gc`: remove half-made and orphaned slots and slots past
    /// high water in every pool; with `drain`, every free slot.
    pub fn gc(&self, drain: bool) -> Result<GcReport> {
        let mut rep = GcReport::default();
        for parent in self.parents()? {
            let st = self.state(&parent)?;
            let _lock = st.refill_lock()?;
            rep.parents += 1;
            rep.removed += self.gc_parent_locked(&parent, drain)?;
        }
        Ok(rep)
    }

    /// Start the background refiller thread (idempotent).
    pub fn start_refiller(self: &Arc<Self>) {
        let mut g = self.refiller.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(refiller::Handle::spawn(Arc::downgrade(self)));
        }
    }

    /// Ask the refiller to look at `parent` (no-op without a refiller).
    pub fn request_refill(&self, parent: &Path) {
        let g = self.refiller.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = g.as_ref() {
            h.request(parent);
        }
    }

    /// Wait until the refiller has handled every request so far (tests).
    pub fn refiller_idle(&self) {
        let h = self
            .refiller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(h) = h {
            h.wait_idle();
        }
    }
}
