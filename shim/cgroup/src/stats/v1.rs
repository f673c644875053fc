use super::{BlkioEntry, BlkioStats, CpuStats, HugetlbStats, MemoryStats, PidsStats, Stats};
use crate::ctl::{self, kv_get};
use crate::dirs::Dirs;
use crate::error::Result;
use crate::fs::CgroupFs;
use std::path::Path;

pub(super) fn read(fs: &dyn CgroupFs, dirs: &Dirs) -> Result<Stats> {
    let mut s = Stats::default();
    if let Some(d) = dirs.v1("memory") {
        s.memory = memory(fs, d)?;
        let oom = ctl::read_kv(fs, d, "memory.oom_control")?;
        s.oom_kills = kv_get(&oom, "oom_kill").unwrap_or(0);
    }
    s.cpu = cpu(fs, dirs.v1("cpuacct"), dirs.v1("cpu"))?;
    if let Some(d) = dirs.v1("pids") {
        s.pids = PidsStats {
            current: ctl::read_u64(fs, d, "pids.current")?,
            limit: ctl::read_u64(fs, d, "pids.max")?,
        };
    }
    if let Some(d) = dirs.v1("blkio") {
        s.blkio = blkio(fs, d)?;
    }
    if let Some(d) = dirs.v1("hugetlb") {
        s.hugetlb = hugetlb(fs, d)?;
    }
    if let Some(d) = dirs.v1("rdma") {
        s.rdma_current = super::v2::rdma(&ctl::read(fs, d, "rdma.current")?);
        s.rdma_limit = super::v2::rdma(&ctl::read(fs, d, "rdma.max")?);
    }
    Ok(s)
}

/// `hugetlb.<size>.*_in_bytes` and `failcnt` for every page size.
fn hugetlb(fs: &dyn CgroupFs, d: &Path) -> Result<Vec<HugetlbStats>> {
    let mut sizes: Vec<String> = std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let ps = n
                        .strip_prefix("hugetlb.")?
                        .strip_suffix(".limit_in_bytes")?;
                    (!ps.contains('.')).then(|| ps.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    sizes.sort();
    sizes
        .into_iter()
        .map(|ps| {
            let f = |k: &str| ctl::read_u64(fs, d, &format!("hugetlb.{ps}.{k}"));
            Ok(HugetlbStats {
                usage: f("usage_in_bytes")?,
                max_usage: f("max_usage_in_bytes")?,
                limit: f("limit_in_bytes")?,
                failcnt: f("failcnt")?,
                page_size: ps,
            })
        })
        .collect()
}

fn memory(fs: &dyn CgroupFs, d: &Path) -> Result<MemoryStats> {
    let raw: std::collections::BTreeMap<String, u64> =
        ctl::read_kv(fs, d, "memory.stat")?.into_iter().collect();
    let usage = ctl::read_u64(fs, d, "memory.usage_in_bytes")?;
    let memsw = ctl::read_u64_opt(fs, d, "memory.memsw.usage_in_bytes")?;
    Ok(MemoryStats {
        usage,
        limit: ctl::read_u64(fs, d, "memory.limit_in_bytes")?,
        max_usage: ctl::read_u64(fs, d, "memory.max_usage_in_bytes")?,
        failcnt: ctl::read_u64(fs, d, "memory.failcnt")?,
        cache: raw
            .get("total_cache")
            .or(raw.get("cache"))
            .copied()
            .unwrap_or(0),
        rss: raw
            .get("total_rss")
            .or(raw.get("rss"))
            .copied()
            .unwrap_or(0),
        swap_usage: memsw.map_or(0, |m| m.saturating_sub(usage)),
        swap_limit: ctl::read_u64_opt(fs, d, "memory.memsw.limit_in_bytes")?.unwrap_or(0),
        swap_max_usage: 0,
        raw,
    })
}

fn cpu(fs: &dyn CgroupFs, acct: Option<&Path>, cpu: Option<&Path>) -> Result<CpuStats> {
    let mut c = CpuStats::default();
    if let Some(d) = acct {
        c.usage_total = ctl::read_u64(fs, d, "cpuacct.usage")?;
        match (
            ctl::read_u64_opt(fs, d, "cpuacct.usage_user")?,
            ctl::read_u64_opt(fs, d, "cpuacct.usage_sys")?,
        ) {
            (Some(u), Some(s)) => (c.usage_user, c.usage_system) = (u, s),
            _ => {
                // Older kernels: cpuacct.stat in USER_HZ ticks.
                let st = ctl::read_kv(fs, d, "cpuacct.stat")?;
                // SAFETY: sysconf has no memory effects.
                let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
                let ns = |t: u64| t * 1_000_000_000 / hz;
                c.usage_user = ns(kv_get(&st, "user").unwrap_or(0));
                c.usage_system = ns(kv_get(&st, "system").unwrap_or(0));
            }
        }
        c.per_cpu = ctl::read(fs, d, "cpuacct.usage_percpu")?
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
    }
    if let Some(d) = cpu {
        let st = ctl::read_kv(fs, d, "cpu.stat")?;
        c.throttling_periods = kv_get(&st, "nr_periods").unwrap_or(0);
        c.throttled_periods = kv_get(&st, "nr_throttled").unwrap_or(0);
        c.throttled_time = kv_get(&st, "throttled_time").unwrap_or(0);
    }
    Ok(c)
}

/// `maj:min Op value` lines, skipping the trailing `Total N`.
fn entries(text: &str) -> Vec<BlkioEntry> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (dev, op, v) = (it.next()?, it.next()?, it.next()?);
            let (maj, min) = dev.split_once(':')?;
            Some(BlkioEntry {
                major: maj.parse().ok()?,
                minor: min.parse().ok()?,
                op: op.to_string(),
                value: v.parse().ok()?,
            })
        })
        .collect()
}

fn blkio(fs: &dyn CgroupFs, d: &Path) -> Result<BlkioStats> {
    // Throttle files count all I/O regardless of the scheduler.
    let f = |name: &str| -> Result<Vec<BlkioEntry>> {
        Ok(if fs.exists(&d.join(name)) {
            entries(&ctl::read(fs, d, name)?)
        } else {
            Vec::new()
        })
    };
    Ok(BlkioStats {
        io_service_bytes: f("blkio.throttle.io_service_bytes_recursive")?,
        io_serviced: f("blkio.throttle.io_serviced_recursive")?,
    })
}
