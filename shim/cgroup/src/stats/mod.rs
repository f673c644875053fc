//! Plain metrics the shim maps to containerd's cgroups v1/v2 Metrics.

mod v1;
mod v2;

use crate::dirs::Dirs;
use crate::error::Result;
use crate::fs::CgroupFs;
use std::collections::BTreeMap;

/// Memory figures in bytes. `u64::MAX` means "no limit".
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryStats {
    pub usage: u64,
    pub limit: u64,
    /// Peak usage (v1 max_usage_in_bytes, v2 memory.peak when present).
    pub max_usage: u64,
    pub failcnt: u64,
    /// Page cache (v1 total_cache, v2 file).
    pub cache: u64,
    /// Anonymous memory (v1 total_rss, v2 anon).
    pub rss: u64,
    pub swap_usage: u64,
    pub swap_limit: u64,
    /// Peak swap usage (v2 memory.swap.peak when present).
    pub swap_max_usage: u64,
    /// Every counter of memory.stat, as the kernel names it.
    pub raw: BTreeMap<String, u64>,
}

/// CPU figures in nanoseconds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuStats {
    pub usage_total: u64,
    pub usage_user: u64,
    pub usage_system: u64,
    /// Per-cpu usage (v1 only; empty on v2).
    pub per_cpu: Vec<u64>,
    pub throttling_periods: u64,
    pub throttled_periods: u64,
    pub throttled_time: u64,
    /// v2 cpu.stat nr_bursts and burst_usec (in ns).
    pub bursts: u64,
    pub burst_time: u64,
}

/// v2 memory.events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryEvents {
    pub low: u64,
    pub high: u64,
    pub max: u64,
    pub oom: u64,
    pub oom_kill: u64,
    pub oom_group_kill: u64,
}

/// v2 io.stat of one device.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IoEntry {
    pub major: u64,
    pub minor: u64,
    pub rbytes: u64,
    pub wbytes: u64,
    pub rios: u64,
    pub wios: u64,
}

/// Hugepage usage of one page size, in bytes (`u64::MAX` = no limit).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HugetlbStats {
    /// e.g. `2MB`.
    pub page_size: String,
    pub usage: u64,
    pub max_usage: u64,
    pub limit: u64,
    /// Allocations refused by the limit.
    pub failcnt: u64,
}

/// rdma.current or rdma.max of one device (`u32::MAX` = max).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RdmaEntry {
    pub device: String,
    pub hca_handles: u32,
    pub hca_objects: u32,
}

/// Task count and limit (`u64::MAX` = no limit).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PidsStats {
    pub current: u64,
    pub limit: u64,
}

/// One block I/O counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlkioEntry {
    pub major: u64,
    pub minor: u64,
    /// `Read`, `Write`, `Sync`, `Async`, `Discard`, `Total` (v1) or
    /// `rbytes`, `wbytes`, `rios`, `wios`, `dbytes`, `dios` (v2).
    pub op: String,
    pub value: u64,
}

/// Block I/O bytes and operations per device.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BlkioStats {
    pub io_service_bytes: Vec<BlkioEntry>,
    pub io_serviced: Vec<BlkioEntry>,
}

/// Everything `stats()` returns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// True when read from cgroup v2 (use the v2 Metrics message).
    pub v2: bool,
    pub memory: MemoryStats,
    pub cpu: CpuStats,
    pub pids: PidsStats,
    pub blkio: BlkioStats,
    /// Per-device io.stat (v2).
    pub io: Vec<IoEntry>,
    pub hugetlb: Vec<HugetlbStats>,
    pub rdma_current: Vec<RdmaEntry>,
    pub rdma_limit: Vec<RdmaEntry>,
    /// v2 only.
    pub memory_events: MemoryEvents,
    /// memory.oom_control oom_kill (v1) or memory.events oom_kill (v2).
    pub oom_kills: u64,
}

/// Read the metrics of a cgroup.
pub fn read(fs: &dyn CgroupFs, dirs: &Dirs) -> Result<Stats> {
    match dirs {
        Dirs::V1(_) => v1::read(fs, dirs),
        Dirs::V2(d) => v2::read(fs, d),
    }
}
