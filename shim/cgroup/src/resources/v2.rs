//! cgroup v2: the OCI v1-shaped values converted as runc converts them.

use super::{devices, invalid};
use crate::ctl::{self, write};
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxResources};
use std::path::Path;

/// Fail early with the controller's name when the parent did not delegate it.
fn need(fs: &dyn CgroupFs, dir: &Path, ctrl: &'static str) -> Result<()> {
    let have = ctl::read(fs, dir, "cgroup.controllers").unwrap_or_default();
    if have.split_whitespace().any(|c| c == ctrl) {
        Ok(())
    } else {
        Err(Error::ControllerMissing(ctrl))
    }
}

fn max_or(v: i64) -> String {
    if v < 0 {
        "max".into()
    } else {
        v.to_string()
    }
}

pub(super) fn apply(fs: &dyn CgroupFs, dir: &Path, res: &LinuxResources) -> Result<()> {
    if !devices::is_allow_all(res.devices().as_deref()) {
        return Err(Error::Unimplemented(
            "device cgroup rules on cgroup v2 (needs a BPF device program)".into(),
        ));
    }
    if let Some(m) = res.memory() {
        memory(fs, dir, m)?;
    }
    if let Some(c) = res.cpu() {
        cpu(fs, dir, c)?;
    }
    if let Some(p) = res.pids() {
        need(fs, dir, "pids")?;
        let v = if p.limit() > 0 {
            p.limit().to_string()
        } else {
            "max".into()
        };
        write(fs, dir, "pids.max", &v)?;
    }
    if let Some(b) = res.block_io() {
        io(fs, dir, b)?;
    }
    if let Some(h) = res.hugepage_limits().as_ref().filter(|h| !h.is_empty()) {
        need(fs, dir, "hugetlb")?;
        for l in h {
            let file = format!("hugetlb.{}.max", l.page_size());
            write(fs, dir, &file, &l.limit().to_string())?;
        }
    }
    if res.network().is_some() {
        return Err(Error::Unimplemented(
            "linux.resources.network on cgroup v2".into(),
        ));
    }
    for (k, v) in res.unified().iter().flatten() {
        if k.contains('/') || k.starts_with("cgroup.") && k != "cgroup.freeze" {
            return Err(invalid("unified", format!("key {k:?} is not allowed")));
        }
        write(fs, dir, k, v)?;
    }
    Ok(())
}

fn memory(fs: &dyn CgroupFs, dir: &Path, m: &LinuxMemory) -> Result<()> {
    need(fs, dir, "memory")?;
    let limit = m.limit().filter(|v| *v != 0);
    if let Some(s) = m.swap().filter(|v| *v != 0) {
        let v = match limit {
            _ if s == -1 => "max".to_string(),
            Some(l) if l > 0 => (s - l).to_string(),
            _ => {
                return Err(invalid(
                    "memory.swap",
                    "a swap limit needs a memory limit on cgroup v2",
                ))
            }
        };
        // Raise swap before a limit change could trip over it.
        write(fs, dir, "memory.swap.max", &v)?;
    }
    if let Some(l) = limit {
        if m.check_before_update() == Some(true) && l > 0 {
            let usage = ctl::read_u64(fs, dir, "memory.current")?;
            if (l as u64) < usage {
                return Err(invalid(
                    "memory.limit",
                    format!("{l} is below usage {usage}"),
                ));
            }
        }
        write(fs, dir, "memory.max", &max_or(l))?;
    }
    if let Some(r) = m.reservation() {
        write(fs, dir, "memory.low", &r.max(0).to_string())?;
    }
    if m.kernel().is_some() || m.kernel_tcp().is_some() {
        tracing::warn!("memory.kernel/kernelTCP have no cgroup v2 equivalent; ignored");
    }
    if m.swappiness().is_some() {
        return Err(Error::Unimplemented(
            "memory.swappiness on cgroup v2".into(),
        ));
    }
    if m.disable_oom_killer() == Some(true) {
        return Err(Error::Unimplemented(
            "memory.disableOOMKiller on cgroup v2".into(),
        ));
    }
    Ok(())
}

/// shares [2, 262144] to weight [1, 10000], as runc and crun map it.
pub(crate) fn shares_to_weight(s: u64) -> u64 {
    1 + (s.saturating_sub(2) * 9999) / 262_142
}

fn cpu(fs: &dyn CgroupFs, dir: &Path, c: &LinuxCpu) -> Result<()> {
    if c.realtime_period().is_some_and(|v| v != 0) || c.realtime_runtime().is_some_and(|v| v != 0) {
        return Err(Error::Unimplemented("cpu.realtime* on cgroup v2".into()));
    }
    let cpu_fields = c.shares().is_some_and(|s| s != 0)
        || c.quota().is_some_and(|q| q != 0)
        || c.period().is_some_and(|p| p != 0)
        || c.burst().is_some()
        || c.idle().is_some();
    if cpu_fields {
        need(fs, dir, "cpu")?;
    }
    if let Some(s) = c.shares().filter(|s| *s != 0) {
        write(fs, dir, "cpu.weight", &shares_to_weight(s).to_string())?;
    }
    let quota = c.quota().filter(|q| *q != 0);
    let period = c.period().filter(|p| *p != 0);
    if quota.is_some() || period.is_some() {
        // Keep the side that was not given.
        let cur = ctl::read(fs, dir, "cpu.max")?;
        let mut it = cur.split_whitespace();
        let cur_q = it.next().unwrap_or("max").to_string();
        let cur_p = it.next().unwrap_or("100000").to_string();
        let q = quota.map_or(cur_q, max_or);
        let p = period.map_or(cur_p, |p| p.to_string());
        write(fs, dir, "cpu.max", &format!("{q} {p}"))?;
    }
    if let Some(b) = c.burst() {
        write(fs, dir, "cpu.max.burst", &b.to_string())?;
    }
    if let Some(i) = c.idle() {
        write(fs, dir, "cpu.idle", &i.to_string())?;
    }
    let cpus = c.cpus().as_deref().filter(|s| !s.is_empty());
    let mems = c.mems().as_deref().filter(|s| !s.is_empty());
    if cpus.is_some() || mems.is_some() {
        need(fs, dir, "cpuset")?;
    }
    if let Some(v) = cpus {
        write(fs, dir, "cpuset.cpus", v)?;
    }
    if let Some(v) = mems {
        write(fs, dir, "cpuset.mems", v)?;
    }
    Ok(())
}

fn io(fs: &dyn CgroupFs, dir: &Path, b: &LinuxBlockIo) -> Result<()> {
    need(fs, dir, "io")?;
    // blkio weight [10, 1000] to io weight [1, 10000].
    let conv = |w: u16| 1 + (u64::from(w).saturating_sub(10) * 9999) / 990;
    let weight_file = if fs.exists(&dir.join("io.bfq.weight")) {
        "io.bfq.weight"
    } else {
        "io.weight"
    };
    if let Some(w) = b.weight().filter(|w| *w != 0) {
        write(fs, dir, weight_file, &conv(w).to_string())?;
    }
    for d in b.weight_device().iter().flatten() {
        if let Some(w) = d.weight() {
            write(
                fs,
                dir,
                weight_file,
                &format!("{}:{} {}", d.major(), d.minor(), conv(w)),
            )?;
        }
    }
    for (key, list) in [
        ("rbps", b.throttle_read_bps_device()),
        ("wbps", b.throttle_write_bps_device()),
        ("riops", b.throttle_read_iops_device()),
        ("wiops", b.throttle_write_iops_device()),
    ] {
        for t in list.iter().flatten() {
            let rate = if t.rate() == 0 {
                "max".to_string()
            } else {
                t.rate().to_string()
            };
            write(
                fs,
                dir,
                "io.max",
                &format!("{}:{} {key}={rate}", t.major(), t.minor()),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn weight_mapping() {
        assert_eq!(super::shares_to_weight(2), 1);
        assert_eq!(super::shares_to_weight(1024), 39);
        assert_eq!(super::shares_to_weight(262_144), 10_000);
    }
}
