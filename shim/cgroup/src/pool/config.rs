//! The `[cgroup]` section of rund's config.

use crate::error::{Error, Result};
use crate::path::CgroupPath;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// `cgroup.pool = on|off` (v1 only: v2 cannot rename a cgroup).
    pub pool: Switch,
    /// Long-lived parents (cgroupsPath form) whose pool is refilled in
    /// batches. Any other parent, such as a Kubernetes pod's cgroup, is
    /// never batch-filled; `rund pool warm` adds a parent until it is gone.
    pub pool_parents: Vec<String>,
    /// Slots made per refill batch.
    pub batch: usize,
    /// Refill when fewer free slots than this remain.
    pub low: usize,
    /// Remove (rather than recycle) cgroups past this many free slots.
    pub high: usize,
    /// Lock, counter and meta files of the long-lived parents.
    pub state_dir: PathBuf,
    /// How long destroy waits for the cgroup to empty.
    pub empty_timeout_ms: u64,
    /// How long freeze waits for the freezer to settle.
    pub freeze_timeout_ms: u64,
    /// Before removing a cgroup, ask the kernel to reclaim its memory
    /// (`memory.reclaim` on v2, kernel >= 5.19; `memory.force_empty` on
    /// v1), so fewer dying memory cgroups stay behind holding page cache.
    /// Off by default: it also evicts shared files (image binaries) that
    /// the pod happened to read first, which the next pod reads again.
    pub reclaim_on_remove: bool,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            pool: Switch::On,
            pool_parents: vec!["/default".into()],
            batch: 32,
            low: 16,
            high: 128,
            state_dir: PathBuf::from("/run/rund/cgroup-pool"),
            empty_timeout_ms: 5000,
            freeze_timeout_ms: 5000,
            reclaim_on_remove: false,
        }
    }
}

impl CgroupConfig {
    /// Refuse values that cannot work, naming the key.
    pub fn validate(&self) -> Result<()> {
        for p in &self.pool_parents {
            CgroupPath::parse(p).map_err(|e| Error::Config {
                key: "pool_parents",
                reason: e.to_string(),
            })?;
        }
        if self.low > self.high {
            return Err(Error::Config {
                key: "low",
                reason: format!("{} is above high ({})", self.low, self.high),
            });
        }
        Ok(())
    }

    /// The configured long-lived parents, relative to the hierarchy roots.
    pub(crate) fn parents_rel(&self) -> Vec<PathBuf> {
        self.pool_parents
            .iter()
            .filter_map(|p| CgroupPath::parse(p).ok().map(|c| c.rel()))
            .collect()
    }
}
