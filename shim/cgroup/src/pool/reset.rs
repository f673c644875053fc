//! Reset a cgroup to what a fresh child of its parent would have, before it
//! goes back into the pool. The list here is the documented one (README).

use crate::ctl::{self, write, write_if_exists};
use crate::dirs::Dirs;
use crate::error::Result;
use crate::fs::CgroupFs;
use std::path::Path;

/// v1: every limit rund can set, plus the peak/fail counters.
pub(crate) fn v1(fs: &dyn CgroupFs, dirs: &Dirs) -> Result<()> {
    let Dirs::V1(list) = dirs else { return Ok(()) };
    for (h, d) in list {
        for c in &h.controllers {
            match c.as_str() {
                "memory" => memory(fs, d)?,
                "cpu" => cpu(fs, d)?,
                "cpuacct" => {
                    write(fs, d, "cpuacct.usage", "0")?;
                }
                "cpuset" => {
                    let parent = d.parent().unwrap_or(d);
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = ctl::read(fs, parent, f)?;
                        write(fs, d, f, v.trim())?;
                    }
                }
                "pids" => write(fs, d, "pids.max", "max")?,
                "blkio" => blkio(fs, d)?,
                "devices" => crate::resources::devices::v1::apply_v1_baseline(fs, d)?,
                "freezer" => write(fs, d, "freezer.state", "THAWED")?,
                "hugetlb" => each_matching(fs, d, "hugetlb.", ".limit_in_bytes", "-1")?,
                "net_cls" => write(fs, d, "net_cls.classid", "0")?,
                _ => {}
            }
        }
    }
    Ok(())
}

fn memory(fs: &dyn CgroupFs, d: &Path) -> Result<()> {
    // memsw must stay >= limit: raise it first.
    write_if_exists(fs, d, "memory.memsw.limit_in_bytes", "-1")?;
    write(fs, d, "memory.limit_in_bytes", "-1")?;
    write(fs, d, "memory.soft_limit_in_bytes", "-1")?;
    write_if_exists(fs, d, "memory.kmem.tcp.limit_in_bytes", "-1")?;
    let parent = d.parent().unwrap_or(d);
    let swappiness = ctl::read(fs, parent, "memory.swappiness")?;
    write(fs, d, "memory.swappiness", swappiness.trim())?;
    write(fs, d, "memory.oom_control", "0")?;
    write_if_exists(fs, d, "memory.move_charge_at_immigrate", "0")?;
    // Drop the page cache the last tenant left charged here; best effort.
    if let Err(e) = write_if_exists(fs, d, "memory.force_empty", "0") {
        tracing::debug!(%e, "memory.force_empty failed");
    }
    for f in [
        "memory.max_usage_in_bytes",
        "memory.failcnt",
        "memory.memsw.max_usage_in_bytes",
        "memory.memsw.failcnt",
    ] {
        write_if_exists(fs, d, f, "0")?;
    }
    Ok(())
}

fn cpu(fs: &dyn CgroupFs, d: &Path) -> Result<()> {
    write(fs, d, "cpu.shares", "1024")?;
    write(fs, d, "cpu.cfs_quota_us", "-1")?;
    write(fs, d, "cpu.cfs_period_us", "100000")?;
    write_if_exists(fs, d, "cpu.cfs_burst_us", "0")?;
    write_if_exists(fs, d, "cpu.idle", "0")?;
    // Runtime before period: a smaller period must not be below the runtime.
    write_if_exists(fs, d, "cpu.rt_runtime_us", "0")?;
    write_if_exists(fs, d, "cpu.rt_period_us", "1000000")?;
    Ok(())
}

fn blkio(fs: &dyn CgroupFs, d: &Path) -> Result<()> {
    for f in [
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
    ] {
        // "maj:min 0" removes a device's throttle.
        for line in ctl::read(fs, d, f)?.lines() {
            if let Some(dev) = line.split_whitespace().next() {
                write(fs, d, f, &format!("{dev} 0"))?;
            }
        }
    }
    for f in ["blkio.weight_device", "blkio.bfq.weight_device"] {
        if !fs.exists(&d.join(f)) {
            continue;
        }
        let text = ctl::read(fs, d, f)?;
        for dev in text.lines().filter_map(|l| l.split_whitespace().next()) {
            if dev != "default" {
                write(fs, d, f, &format!("{dev} 0"))?;
            }
        }
    }
    write_if_exists(fs, d, "blkio.weight", "500")?;
    write_if_exists(fs, d, "blkio.bfq.weight", "100")?;
    write_if_exists(fs, d, "blkio.reset_stats", "1")?;
    Ok(())
}

/// Write `value` to every file named `prefix*suffix` in `d`.
fn each_matching(
    fs: &dyn CgroupFs,
    d: &Path,
    prefix: &str,
    suffix: &str,
    value: &str,
) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(d) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(suffix) && !name.contains(".rsvd.") {
            write(fs, d, &name, value)?;
        }
    }
    Ok(())
}
