//! cgroup v1 controllers, written by hand: cpu and cpuacct are separate
//! hierarchies on the target host, and each file goes through the fs seam.

use super::{devices::v1 as devices, invalid, rdma_line, Mode};
use crate::ctl::{self, write};
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxResources};
use std::path::Path;

pub(super) fn apply(
    fs: &dyn CgroupFs,
    dirs: &Dirs,
    res: &LinuxResources,
    mode: Mode,
) -> Result<()> {
    let need = |ctrl: &'static str| dirs.v1(ctrl).ok_or(Error::ControllerMissing(ctrl));
    if let Some(m) = res.memory() {
        memory(fs, need("memory")?, m)?;
    }
    if let Some(c) = res.cpu() {
        cpu(fs, dirs, c)?;
    }
    if let Some(p) = res.pids() {
        let v = if p.limit() > 0 {
            p.limit().to_string()
        } else {
            "max".into()
        };
        write(fs, need("pids")?, "pids.max", &v)?;
    }
    if let Some(b) = res.block_io() {
        blkio(fs, need("blkio")?, b)?;
    }
    if let Some(h) = res.hugepage_limits().as_ref().filter(|h| !h.is_empty()) {
        let dir = need("hugetlb")?;
        for l in h {
            let file = format!("hugetlb.{}.limit_in_bytes", l.page_size());
            write(fs, dir, &file, &l.limit().to_string())?;
        }
    }
    if let Some(n) = res.network() {
        if let Some(id) = n.class_id() {
            write(fs, need("net_cls")?, "net_cls.classid", &id.to_string())?;
        }
        for p in n.priorities().iter().flatten() {
            let v = format!("{} {}", p.name(), p.priority());
            write(fs, need("net_prio")?, "net_prio.ifpriomap", &v)?;
        }
    }
    if let Some(r) = res.rdma().as_ref().filter(|r| !r.is_empty()) {
        let dir = need("rdma")?;
        let mut devs: Vec<_> = r.iter().collect();
        devs.sort_by_key(|(k, _)| k.as_str());
        for (dev, l) in devs {
            write(fs, dir, "rdma.max", &rdma_line(dev, l))?;
        }
    }
    if res.unified().as_ref().is_some_and(|u| !u.is_empty()) {
        return Err(invalid(
            "unified",
            "cgroup v2 keys given on a cgroup v1 host",
        ));
    }
    let rules = res.devices().as_deref();
    match mode {
        Mode::CreateOnBaseline => {
            devices::apply_v1_on_baseline(fs, need("devices")?, rules.unwrap_or(&[]))?
        }
        Mode::Create => devices::apply_v1(fs, need("devices")?, rules.unwrap_or(&[]))?,
        Mode::Update => {
            if let Some(r) = rules {
                devices::apply_v1(fs, need("devices")?, r)?;
            }
        }
    }
    Ok(())
}

fn limit_str(v: i64) -> String {
    if v < 0 {
        "-1".into()
    } else {
        v.to_string()
    }
}

fn memory(fs: &dyn CgroupFs, dir: &Path, m: &LinuxMemory) -> Result<()> {
    let limit = m.limit().filter(|v| *v != 0);
    let mut swap = m.swap().filter(|v| *v != 0);
    if limit == Some(-1) && swap.is_none() {
        swap = Some(-1);
    }
    if m.check_before_update() == Some(true) {
        if let Some(l) = limit.filter(|l| *l > 0) {
            let usage = ctl::read_u64(fs, dir, "memory.usage_in_bytes")?;
            if (l as u64) < usage {
                return Err(invalid(
                    "memory.limit",
                    format!("{l} is below usage {usage}"),
                ));
            }
        }
    }
    let has_memsw = fs.exists(&dir.join("memory.memsw.limit_in_bytes"));
    if swap.is_some() && !has_memsw {
        return Err(invalid(
            "memory.swap",
            "swap accounting (memory.memsw) is off on this host",
        ));
    }
    match (limit, swap) {
        (Some(l), Some(s)) => {
            // The kernel wants limit <= memsw at every step: pick the order.
            let cur = ctl::read_u64(fs, dir, "memory.limit_in_bytes")?;
            if s == -1 || cur < s as u64 {
                write(fs, dir, "memory.memsw.limit_in_bytes", &limit_str(s))?;
                write(fs, dir, "memory.limit_in_bytes", &limit_str(l))?;
            } else {
                write(fs, dir, "memory.limit_in_bytes", &limit_str(l))?;
                write(fs, dir, "memory.memsw.limit_in_bytes", &limit_str(s))?;
            }
        }
        (Some(l), None) => write(fs, dir, "memory.limit_in_bytes", &limit_str(l))?,
        (None, Some(s)) => write(fs, dir, "memory.memsw.limit_in_bytes", &limit_str(s))?,
        (None, None) => {}
    }
    if let Some(r) = m.reservation() {
        write(fs, dir, "memory.soft_limit_in_bytes", &limit_str(r))?;
    }
    if let Some(k) = m.kernel() {
        // Deprecated by the kernel (a no-op since 5.16) but still accepted.
        if !ctl::write_if_exists(fs, dir, "memory.kmem.limit_in_bytes", &limit_str(k))? {
            tracing::warn!("memory.kernel ignored: memory.kmem.limit_in_bytes is absent");
        }
    }
    if let Some(k) = m.kernel_tcp() {
        write(fs, dir, "memory.kmem.tcp.limit_in_bytes", &limit_str(k))?;
    }
    if let Some(s) = m.swappiness() {
        write(fs, dir, "memory.swappiness", &s.to_string())?;
    }
    if let Some(d) = m.disable_oom_killer() {
        write(fs, dir, "memory.oom_control", if d { "1" } else { "0" })?;
    }
    Ok(())
}

fn cpu(fs: &dyn CgroupFs, dirs: &Dirs, c: &LinuxCpu) -> Result<()> {
    let need = |ctrl: &'static str| dirs.v1(ctrl).ok_or(Error::ControllerMissing(ctrl));
    if let Some(s) = c.shares().filter(|s| *s != 0) {
        let dir = need("cpu")?;
        write(fs, dir, "cpu.shares", &s.to_string())?;
        // The kernel clamps silently; report what it really took.
        let got = ctl::read_u64(fs, dir, "cpu.shares")?;
        if got != s {
            return Err(invalid(
                "cpu.shares",
                format!("kernel set {got} instead of {s}"),
            ));
        }
    }
    if let Some(p) = c.period().filter(|p| *p != 0) {
        write(fs, need("cpu")?, "cpu.cfs_period_us", &p.to_string())?;
    }
    if let Some(q) = c.quota().filter(|q| *q != 0) {
        write(fs, need("cpu")?, "cpu.cfs_quota_us", &limit_str(q))?;
    }
    if let Some(b) = c.burst() {
        write(fs, need("cpu")?, "cpu.cfs_burst_us", &b.to_string())?;
    }
    if let Some(i) = c.idle() {
        write(fs, need("cpu")?, "cpu.idle", &i.to_string())?;
    }
    if let Some(p) = c.realtime_period().filter(|p| *p != 0) {
        write(fs, need("cpu")?, "cpu.rt_period_us", &p.to_string())?;
    }
    if let Some(r) = c.realtime_runtime().filter(|r| *r != 0) {
        write(fs, need("cpu")?, "cpu.rt_runtime_us", &r.to_string())?;
    }
    if let Some(cpus) = c.cpus().as_deref().filter(|s| !s.is_empty()) {
        write(fs, need("cpuset")?, "cpuset.cpus", cpus)?;
    }
    if let Some(mems) = c.mems().as_deref().filter(|s| !s.is_empty()) {
        write(fs, need("cpuset")?, "cpuset.mems", mems)?;
    }
    Ok(())
}

fn blkio(fs: &dyn CgroupFs, dir: &Path, b: &LinuxBlockIo) -> Result<()> {
    // CFQ's files are gone from current kernels; BFQ's take the same range.
    let pick = |plain: &'static str, bfq: &'static str| {
        if fs.exists(&dir.join(plain)) {
            plain
        } else {
            bfq
        }
    };
    if let Some(w) = b.weight().filter(|w| *w != 0) {
        write(
            fs,
            dir,
            pick("blkio.weight", "blkio.bfq.weight"),
            &w.to_string(),
        )?;
    }
    if let Some(w) = b.leaf_weight().filter(|w| *w != 0) {
        write(fs, dir, "blkio.leaf_weight", &w.to_string())?;
    }
    for d in b.weight_device().iter().flatten() {
        if let Some(w) = d.weight() {
            let v = format!("{}:{} {}", d.major(), d.minor(), w);
            write(
                fs,
                dir,
                pick("blkio.weight_device", "blkio.bfq.weight_device"),
                &v,
            )?;
        }
    }
    for (file, list) in [
        (
            "blkio.throttle.read_bps_device",
            b.throttle_read_bps_device(),
        ),
        (
            "blkio.throttle.write_bps_device",
            b.throttle_write_bps_device(),
        ),
        (
            "blkio.throttle.read_iops_device",
            b.throttle_read_iops_device(),
        ),
        (
            "blkio.throttle.write_iops_device",
            b.throttle_write_iops_device(),
        ),
    ] {
        for t in list.iter().flatten() {
            write(
                fs,
                dir,
                file,
                &format!("{}:{} {}", t.major(), t.minor(), t.rate()),
            )?;
        }
    }
    Ok(())
}
