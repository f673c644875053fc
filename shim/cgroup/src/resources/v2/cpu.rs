//! cpu and cpuset on v2: `cpu.weight`, `cpu.max`, `cpu.max.burst`,
//! `cpu.idle`, `cpuset.cpus`, `cpuset.mems`.

use super::need;
use crate::ctl::write;
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxCpu;
use std::path::Path;

/// cpu.shares [2, 262144] to cpu.weight [1, 10000], as runc (and crun)
/// convert since 2025: a quadratic in log2(shares) through the minimum, the
/// default (1024 -> 100) and the maximum. 0 means unset.
pub fn shares_to_weight(shares: u64) -> u64 {
    match shares {
        0 => 0,
        1..=2 => 1,
        262_144.. => 10_000,
        s => {
            let l = (s as f64).log2();
            let exp = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
            10f64.powf(exp).ceil() as u64
        }
    }
}

pub(super) fn apply(fs: &dyn CgroupFs, dir: &Path, c: &LinuxCpu) -> Result<()> {
    if c.realtime_period().is_some_and(|v| v != 0) || c.realtime_runtime().is_some_and(|v| v != 0) {
        // runc ignores these on v2 too: the kernel has no per-cgroup
        // realtime budget there.
        tracing::warn!("cpu.realtimeRuntime/realtimePeriod have no cgroup v2 equivalent; ignored");
    }
    let weight = shares_to_weight(c.shares().unwrap_or(0));
    let quota = c.quota().unwrap_or(0);
    let period = c.period().unwrap_or(0);
    if weight == 0 && quota == 0 && period == 0 && c.idle().is_none() && c.burst().is_none() {
        return Ok(());
    }
    need(fs, dir, "cpu")?;
    if let Some(i) = c.idle() {
        write(fs, dir, "cpu.idle", &i.to_string())?;
    }
    if weight != 0 {
        write(fs, dir, "cpu.weight", &weight.to_string())?;
    }
    let mut burst_later = None;
    if let Some(b) = c.burst() {
        match write(fs, dir, "cpu.max.burst", &b.to_string()) {
            Ok(()) => {}
            // A burst above the current quota is refused until the new
            // quota is in: retry after it (runc does the same).
            Err(e) if e.errno() == Some(libc::EINVAL) && quota != 0 => burst_later = Some(b),
            Err(e) => return Err(e),
        }
    }
    if quota != 0 || period != 0 {
        let q = if quota > 0 {
            quota.to_string()
        } else {
            "max".to_string()
        };
        let p = if period == 0 { 100_000 } else { period };
        write(fs, dir, "cpu.max", &format!("{q} {p}"))?;
        if let Some(b) = burst_later {
            write(fs, dir, "cpu.max.burst", &b.to_string())?;
        }
    }
    Ok(())
}

pub(super) fn cpuset(fs: &dyn CgroupFs, dir: &Path, c: &LinuxCpu) -> Result<()> {
    let cpus = c.cpus().as_deref().filter(|s| !s.is_empty());
    let mems = c.mems().as_deref().filter(|s| !s.is_empty());
    if cpus.is_none() && mems.is_none() {
        return Ok(());
    }
    need(fs, dir, "cpuset")?;
    if let Some(v) = cpus {
        write(fs, dir, "cpuset.cpus", v)?;
    }
    if let Some(v) = mems {
        write(fs, dir, "cpuset.mems", v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shares_to_weight;

    #[test]
    fn runc_weight_cases() {
        // runc's TestConvertCPUSharesToCgroupV2Value.
        for (shares, weight) in [
            (0, 0),
            (1, 1),
            (2, 1),
            (3, 2),
            (1024, 100),
            (262_143, 10_000),
            (262_144, 10_000),
            (262_145, 10_000),
        ] {
            assert_eq!(shares_to_weight(shares), weight, "shares {shares}");
        }
        // Monotonic over the whole range.
        let mut last = 0;
        for s in 2..=262_144 {
            let w = shares_to_weight(s);
            assert!(w >= last && (1..=10_000).contains(&w), "shares {s} -> {w}");
            last = w;
        }
        // Kubernetes' usual values.
        assert_eq!(shares_to_weight(512), 59);
        assert_eq!(shares_to_weight(2048), 174);
    }
}
