//! rund-cgroup: container cgroups for rund on cgroup v1 (including the hybrid
//! layout with cpu and cpuacct on separate mounts) and cgroup v2. A
//! container's cgroup is always at its cgroupsPath; on v1 a pool of cgroups
//! made ahead is handed out by rename. v2 devices are a BPF filter.
//!
//! Entry point: [`Cgroups`] (one per process), then [`CgroupManager`] per
//! container. See README.md for the design and what users see in the tree.

mod birth;
pub mod bpf;
mod context;
mod ctl;
mod dirs;
mod error;
pub mod fs;
mod hierarchy;
mod layout_cache;
mod manager;
mod oom;
mod path;
pub mod pool;
pub mod resources;
pub mod stats;
mod tree;

pub use context::Cgroups;
pub use dirs::Dirs;
pub use error::{Error, Result};
pub use hierarchy::{Hierarchy, V1Hierarchy};
pub use manager::{CgroupManager, Destroyed, FreezerState};
pub use oom::OomWatcher;
pub use path::{CgroupPath, SLOT_PREFIX};
pub use pool::{
    CgroupConfig, GcReport, PendingRecycle, Pool, PoolStatus, Released, Releasing, Switch,
};
pub use stats::Stats;
