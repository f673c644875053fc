use super::{BlkioEntry, BlkioStats, CpuStats, MemoryStats, PidsStats, Stats};
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
            raw,
        };
        let ev = ctl::read_kv(fs, d, "memory.events")?;
        s.oom_kills = kv_get(&ev, "oom_kill").unwrap_or(0);
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
    };
    if fs.exists(&d.join("pids.current")) {
        s.pids = PidsStats {
            current: ctl::read_u64(fs, d, "pids.current")?,
            limit: ctl::read_u64(fs, d, "pids.max")?,
        };
    }
    if fs.exists(&d.join("io.stat")) {
        s.blkio = io_stat(&ctl::read(fs, d, "io.stat")?);
    }
    Ok(s)
}

/// `maj:min rbytes=1 wbytes=2 rios=3 ...` lines.
fn io_stat(text: &str) -> BlkioStats {
    let mut b = BlkioStats::default();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let Some((maj, min)) = it.next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (maj.parse(), min.parse()) else {
            continue;
        };
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(value) = v.parse() else { continue };
            let e = BlkioEntry {
                major,
                minor,
                op: k.to_string(),
                value,
            };
            match k {
                "rbytes" | "wbytes" | "dbytes" => b.io_service_bytes.push(e),
                "rios" | "wios" | "dios" => b.io_serviced.push(e),
                _ => {}
            }
        }
    }
    b
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_io_stat() {
        let b = super::io_stat("8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n");
        assert_eq!(b.io_service_bytes.len(), 3);
        assert_eq!(b.io_serviced[1].value, 2);
    }
}
