use super::{
    BlkioEntry, BlkioStats, CpuStats, HugetlbStats, IoEntry, MemoryEvents, MemoryStats, PidsStats,
    RdmaEntry, Stats,
};
use crate::ctl::{self, kv_get};
use crate::error::Result;
use crate::fs::CgroupFs;
use std::path::Path;

/// Reads what the parent delegated; missing controllers leave zeros.
pub(super) fn read(fs: &dyn CgroupFs, d: &Path) -> Result<Stats> {
    let mut s = Stats {
        v2: true,
        ..Stats::default()
    };
    if fs.exists(&d.join("memory.current")) {
        let raw: std::collections::BTreeMap<String, u64> =
            ctl::read_kv(fs, d, "memory.stat")?.into_iter().collect();
        s.memory = MemoryStats {
            usage: ctl::read_u64(fs, d, "memory.current")?,
            limit: ctl::read_u64(fs, d, "memory.max")?,
            max_usage: ctl::read_u64_opt(fs, d, "memory.peak")?.unwrap_or(0),
            failcnt: 0,
            cache: raw.get("file").copied().unwrap_or(0),
            rss: raw.get("anon").copied().unwrap_or(0),
            swap_usage: ctl::read_u64_opt(fs, d, "memory.swap.current")?.unwrap_or(0),
            swap_limit: ctl::read_u64_opt(fs, d, "memory.swap.max")?.unwrap_or(0),
            swap_max_usage: ctl::read_u64_opt(fs, d, "memory.swap.peak")?.unwrap_or(0),
            raw,
        };
        let ev = ctl::read_kv(fs, d, "memory.events")?;
        let get = |k: &str| kv_get(&ev, k).unwrap_or(0);
        s.memory_events = MemoryEvents {
            low: get("low"),
            high: get("high"),
            max: get("max"),
            oom: get("oom"),
            oom_kill: get("oom_kill"),
            oom_group_kill: get("oom_group_kill"),
        };
        s.oom_kills = s.memory_events.oom_kill;
    }
    // cpu.stat is always there on v2 (usage even without the cpu controller).
    let st = ctl::read_kv(fs, d, "cpu.stat")?;
    let us = |k: &str| kv_get(&st, k).unwrap_or(0) * 1000;
    s.cpu = CpuStats {
        usage_total: us("usage_usec"),
        usage_user: us("user_usec"),
        usage_system: us("system_usec"),
        per_cpu: Vec::new(),
        throttling_periods: kv_get(&st, "nr_periods").unwrap_or(0),
        throttled_periods: kv_get(&st, "nr_throttled").unwrap_or(0),
        throttled_time: us("throttled_usec"),
        bursts: kv_get(&st, "nr_bursts").unwrap_or(0),
        burst_time: us("burst_usec"),
    };
    if fs.exists(&d.join("pids.current")) {
        s.pids = PidsStats {
            current: ctl::read_u64(fs, d, "pids.current")?,
            limit: ctl::read_u64(fs, d, "pids.max")?,
        };
    }
    if fs.exists(&d.join("io.stat")) {
        s.io = io_stat(&ctl::read(fs, d, "io.stat")?);
        s.blkio = blkio_of(&s.io);
    }
    s.hugetlb = hugetlb(fs, d)?;
    if fs.exists(&d.join("rdma.current")) {
        s.rdma_current = rdma(&ctl::read(fs, d, "rdma.current")?);
        s.rdma_limit = rdma(&ctl::read(fs, d, "rdma.max")?);
    }
    Ok(s)
}

/// `maj:min rbytes=1 wbytes=2 rios=3 ...` lines.
fn io_stat(text: &str) -> Vec<IoEntry> {
    let mut out = Vec::new();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let Some((maj, min)) = it.next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (maj.parse(), min.parse()) else {
            continue;
        };
        let mut e = IoEntry {
            major,
            minor,
            ..Default::default()
        };
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse() else { continue };
            match k {
                "rbytes" => e.rbytes = v,
                "wbytes" => e.wbytes = v,
                "rios" => e.rios = v,
                "wios" => e.wios = v,
                _ => {}
            }
        }
        out.push(e);
    }
    out
}

/// The v1-shaped view of io.stat (Read/Write per device).
fn blkio_of(io: &[IoEntry]) -> BlkioStats {
    let mut b = BlkioStats::default();
    let e = |x: &IoEntry, op: &str, value: u64| BlkioEntry {
        major: x.major,
        minor: x.minor,
        op: op.into(),
        value,
    };
    for x in io {
        b.io_service_bytes.push(e(x, "Read", x.rbytes));
        b.io_service_bytes.push(e(x, "Write", x.wbytes));
        b.io_serviced.push(e(x, "Read", x.rios));
        b.io_serviced.push(e(x, "Write", x.wios));
    }
    b
}

/// `hugetlb.<size>.{current,max,events}` for every page size present.
fn hugetlb(fs: &dyn CgroupFs, d: &Path) -> Result<Vec<HugetlbStats>> {
    let mut sizes: Vec<String> = std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let ps = n.strip_prefix("hugetlb.")?.strip_suffix(".current")?;
                    (!ps.contains('.')).then(|| ps.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    sizes.sort();
    sizes
        .into_iter()
        .map(|ps| {
            let events = ctl::read_kv(fs, d, &format!("hugetlb.{ps}.events")).unwrap_or_default();
            Ok(HugetlbStats {
                usage: ctl::read_u64(fs, d, &format!("hugetlb.{ps}.current"))?,
                max_usage: 0,
                limit: ctl::read_u64(fs, d, &format!("hugetlb.{ps}.max"))?,
                failcnt: kv_get(&events, "max").unwrap_or(0),
                page_size: ps,
            })
        })
        .collect()
}

/// `dev hca_handle=N hca_object=M` lines (`max` reads as u32::MAX).
pub(super) fn rdma(text: &str) -> Vec<RdmaEntry> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let mut e = RdmaEntry {
                device: it.next()?.to_string(),
                ..Default::default()
            };
            for kv in it {
                let (k, v) = kv.split_once('=')?;
                let v = if v == "max" {
                    u32::MAX
                } else {
                    v.parse().ok()?
                };
                match k {
                    "hca_handle" => e.hca_handles = v,
                    "hca_object" => e.hca_objects = v,
                    _ => {}
                }
            }
            Some(e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_io_stat_and_rdma() {
        let io = super::io_stat("8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n");
        assert_eq!((io[0].major, io[0].rbytes, io[0].wios), (8, 10, 2));
        let b = super::blkio_of(&io);
        assert_eq!(b.io_service_bytes[1].value, 20);
        assert_eq!(b.io_serviced[0].op, "Read");
        let r = super::rdma("mlx5_0 hca_handle=2 hca_object=max\n");
        assert_eq!(r[0].device, "mlx5_0");
        assert_eq!((r[0].hca_handles, r[0].hca_objects), (2, u32::MAX));
    }
}
