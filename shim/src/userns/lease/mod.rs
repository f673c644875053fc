//! `LeaseStore`: the node-wide allocator of per-sandbox id ranges, shared
//! by every shim process through a lock file (see README.md for the file
//! format and the reclaim rule).

#[doc(hidden)]
pub mod file;
pub mod owner;
mod repair;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::UsernsConfig;

pub use file::LeaseFileError;
pub use owner::{Liveness, Owner, ProcLiveness};
pub use repair::RepairReport;

use super::pool::{overlaps, Pool};
use super::UsernsError;

/// A sandbox's host id range: container ids `0..size` map to
/// `host_base..host_base+size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub host_base: u32,
    pub size: u32,
    /// Slot in the pool (`host_base = base + index * size` while the pool
    /// config is unchanged).
    pub index: u32,
}

/// `Lease::index` of a range the spec chose (not a pool slot).
pub const SPEC_INDEX: u32 = u32::MAX;

/// One line of the leases file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseEntry {
    pub sandbox_id: String,
    #[serde(flatten)]
    pub lease: Lease,
    pub owner: Owner,
}

pub struct LeaseStore {
    dir: PathBuf,
    pool: Pool,
    live: Arc<dyn Liveness>,
}

impl LeaseStore {
    /// The store in `dir` (its leases file is `dir/leases.json`). Checks the
    /// pool config; touches nothing on disk until the first operation.
    pub fn new(dir: impl Into<PathBuf>, cfg: &UsernsConfig) -> Result<LeaseStore, UsernsError> {
        Ok(LeaseStore {
            dir: dir.into(),
            pool: Pool::from_config(cfg)?,
            live: Arc::new(ProcLiveness),
        })
    }

    /// The default place: `<state_dir>/userns/leases.json`.
    pub fn in_state_dir(state_dir: &Path, cfg: &UsernsConfig) -> Result<LeaseStore, UsernsError> {
        Self::new(state_dir.join("userns"), cfg)
    }

    /// Replaces the /proc liveness probe (tests).
    pub fn with_liveness(mut self, live: Arc<dyn Liveness>) -> LeaseStore {
        self.live = live;
        self
    }

    pub fn pool(&self) -> Pool {
        self.pool
    }

    /// Path of the leases file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(file::LEASES_FILE)
    }

    /// The lease of `sandbox_id`: its existing one if it has one and its
    /// owner is `owner_pid` or dead (a restarted shim gets the same range
    /// back, and becomes its owner), else the lowest free range, after
    /// reclaiming leases whose owner is dead. Another live owner's lease of
    /// the same id is another running sandbox's (the same id in another
    /// containerd namespace): refused, never shared.
    pub fn allocate(&self, sandbox_id: &str, owner_pid: i32) -> Result<Lease, UsernsError> {
        if sandbox_id.is_empty() {
            return Err(UsernsError::Config("empty sandbox id".into()));
        }
        let owner = self.owner_of(owner_pid)?;
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        if let Some(e) = state.leases.iter_mut().find(|e| e.sandbox_id == sandbox_id) {
            let lease = e.lease;
            if e.owner == owner {
                return Ok(lease);
            }
            if self.live.is_alive(&e.owner) {
                return Err(UsernsError::IdInUse {
                    id: sandbox_id.to_string(),
                    pid: e.owner.pid,
                    host_base: lease.host_base,
                    end: lease.host_base as u64 + lease.size as u64,
                });
            }
            e.owner = owner;
            locked.store(&state)?;
            return Ok(lease);
        }
        let before = state.leases.len();
        state.leases.retain(|e| self.live.is_alive(&e.owner));
        let reclaimed = before - state.leases.len();
        if reclaimed > 0 {
            tracing::info!(reclaimed, "reclaimed user namespace leases of dead owners");
        }
        let Some(lease) = self.lowest_free(&state.leases) else {
            if reclaimed > 0 {
                locked.store(&state)?;
            }
            let in_use = (0..self.pool.count)
                .filter(|&i| self.slot_taken(i, &state.leases))
                .count();
            return Err(UsernsError::Exhausted {
                in_use: in_use as u32,
                count: self.pool.count,
                base: self.pool.base,
                size: self.pool.size,
            });
        };
        state.leases.push(LeaseEntry {
            sandbox_id: sandbox_id.to_string(),
            lease,
            owner,
        });
        locked.store(&state)?;
        Ok(lease)
    }

    /// Records the host ranges a spec chose (`linux.uidMappings` and
    /// `gidMappings`), clipped to the pool, so the pool never hands them
    /// out. A range that overlaps a live pool lease of another sandbox is
    /// refused; ranges of two spec-mapped sandboxes may overlap (that is the
    /// specs' choice). Ranges outside the pool need no record. Returns the
    /// number of ranges recorded.
    pub fn reserve(
        &self,
        sandbox_id: &str,
        owner_pid: i32,
        ranges: &[(u32, u32)],
    ) -> Result<usize, UsernsError> {
        let owner = self.owner_of(owner_pid)?;
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        state.leases.retain(|e| self.live.is_alive(&e.owner));
        for &(host, size) in ranges {
            let clash = state.leases.iter().find(|e| {
                e.sandbox_id != sandbox_id
                    && e.lease.index != SPEC_INDEX
                    && overlaps(host, size, e.lease.host_base, e.lease.size)
            });
            if let Some(e) = clash {
                return Err(UsernsError::Mapping(format!(
                    "host ids {host}..{} overlap ids {}..{} that rund leased to sandbox {}; \
                     pick ids outside [userns] base..base+size*count or let rund allocate",
                    host as u64 + size as u64,
                    e.lease.host_base,
                    e.lease.host_base as u64 + e.lease.size as u64,
                    e.sandbox_id
                )));
            }
        }
        let (lo, hi) = (
            self.pool.base as u64,
            self.pool.base as u64 + self.pool.size as u64 * self.pool.count as u64,
        );
        let mut recorded = 0;
        for &(host, size) in ranges {
            let start = (host as u64).max(lo);
            let end = (host as u64 + size as u64).min(hi);
            if start >= end {
                continue;
            }
            let (host_base, size) = (start as u32, (end - start) as u32);
            let lease = Lease {
                host_base,
                size,
                index: SPEC_INDEX,
            };
            let known = state
                .leases
                .iter()
                .any(|e| e.sandbox_id == sandbox_id && e.lease == lease);
            recorded += 1;
            if !known {
                state.leases.push(LeaseEntry {
                    sandbox_id: sandbox_id.to_string(),
                    lease,
                    owner: owner.clone(),
                });
            }
        }
        locked.store(&state)?;
        Ok(recorded)
    }

    /// Hands `sandbox_id`'s lease to `owner_pid` (e.g. the sandbox agent,
    /// whose life is the sandbox's). Errors if there is no such lease.
    pub fn adopt(&self, sandbox_id: &str, owner_pid: i32) -> Result<Lease, UsernsError> {
        let owner = self.owner_of(owner_pid)?;
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        let mut first = None;
        // A spec-mapped sandbox has one entry per range: move them all.
        for e in state
            .leases
            .iter_mut()
            .filter(|e| e.sandbox_id == sandbox_id)
        {
            e.owner = owner.clone();
            first.get_or_insert(e.lease);
        }
        let lease = first.ok_or_else(|| {
            UsernsError::Config(format!(
                "sandbox {sandbox_id:?} has no user namespace lease"
            ))
        })?;
        locked.store(&state)?;
        Ok(lease)
    }

    /// Frees `sandbox_id`'s range. Idempotent: returns the lease it freed,
    /// or None if there was none.
    pub fn release(&self, sandbox_id: &str) -> Result<Option<Lease>, UsernsError> {
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        let Some(pos) = state.leases.iter().position(|e| e.sandbox_id == sandbox_id) else {
            return Ok(None);
        };
        let gone = state.leases[pos].lease;
        state.leases.retain(|e| e.sandbox_id != sandbox_id);
        locked.store(&state)?;
        Ok(Some(gone))
    }

    /// Releases `sandbox_id`'s entries only while `owner_pid` still owns
    /// them: ids a shim leased ahead of a Create that never took them (an
    /// agent that took them owns them, and a later shim of the same id may).
    pub fn release_owned(&self, sandbox_id: &str, owner_pid: i32) -> Result<usize, UsernsError> {
        let owner = self.owner_of(owner_pid)?;
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        let before = state.leases.len();
        state
            .leases
            .retain(|e| !(e.sandbox_id == sandbox_id && e.owner == owner));
        let gone = before - state.leases.len();
        if gone > 0 {
            locked.store(&state)?;
        }
        Ok(gone)
    }

    pub fn get(&self, sandbox_id: &str) -> Result<Option<Lease>, UsernsError> {
        let locked = file::lock(&self.dir)?;
        Ok(locked
            .load()?
            .leases
            .into_iter()
            .find(|e| e.sandbox_id == sandbox_id)
            .map(|e| e.lease))
    }

    /// Every lease, live or leaked, in file order.
    pub fn list(&self) -> Result<Vec<LeaseEntry>, UsernsError> {
        file::lock(&self.dir)?.load().map(|f| f.leases)
    }

    /// Drops leases whose owner is dead and returns them.
    pub fn reclaim(&self) -> Result<Vec<LeaseEntry>, UsernsError> {
        let locked = file::lock(&self.dir)?;
        let mut state = locked.load()?;
        let (live, dead): (Vec<_>, Vec<_>) = state
            .leases
            .into_iter()
            .partition(|e| self.live.is_alive(&e.owner));
        state.leases = live;
        if !dead.is_empty() {
            locked.store(&state)?;
        }
        Ok(dead)
    }

    /// See `repair.rs`: a readable file is left alone; a corrupt one is
    /// moved aside and rebuilt from the user namespaces of live processes.
    pub fn repair(&self) -> Result<RepairReport, UsernsError> {
        repair::repair(&self.dir, self.pool, self.live.as_ref(), Path::new("/proc"))
    }

    /// `pid` as a lease owner; it must be running.
    fn owner_of(&self, pid: i32) -> Result<Owner, UsernsError> {
        self.live.owner(pid).ok_or(UsernsError::OwnerGone(pid))
    }

    fn slot_taken(&self, i: u32, leases: &[LeaseEntry]) -> bool {
        let base = self.pool.slot_base(i);
        leases
            .iter()
            .any(|e| overlaps(base, self.pool.size, e.lease.host_base, e.lease.size))
    }

    /// Leases may come from an older pool config, so a slot is free only if
    /// it overlaps no lease at all.
    fn lowest_free(&self, leases: &[LeaseEntry]) -> Option<Lease> {
        (0..self.pool.count)
            .find(|&i| !self.slot_taken(i, leases))
            .map(|index| Lease {
                host_base: self.pool.slot_base(index),
                size: self.pool.size,
                index,
            })
    }
}
