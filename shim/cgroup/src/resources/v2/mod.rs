//! cgroup v2: the OCI (v1-shaped) values converted as runc's fs2 driver
//! converts them, written in runc's order: pids, memory, io, cpu, devices,
//! cpuset, hugetlb, rdma, then the `unified` map.

mod cpu;
mod io;
mod memory;

pub use cpu::shares_to_weight;

use super::{devices, rdma_line, Mode};
use crate::ctl::{self, write};
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxResources;
use std::path::Path;

/// Fail with the controller's name when the parent did not delegate it.
pub(super) fn need(fs: &dyn CgroupFs, dir: &Path, ctrl: &'static str) -> Result<()> {
    let have = ctl::read(fs, dir, "cgroup.controllers").unwrap_or_default();
    if have.split_whitespace().any(|c| c == ctrl) {
        Ok(())
    } else {
        Err(Error::ControllerMissing(ctrl))
    }
}

pub(super) fn apply(fs: &dyn CgroupFs, dir: &Path, res: &LinuxResources, mode: Mode) -> Result<()> {
    if let Some(p) = res.pids() {
        need(fs, dir, "pids")?;
        let v = if p.limit() > 0 {
            p.limit().to_string()
        } else {
            "max".into()
        };
        write(fs, dir, "pids.max", &v)?;
    }
    if let Some(m) = res.memory() {
        memory::apply(fs, dir, m)?;
    }
    if let Some(b) = res.block_io() {
        io::apply(fs, dir, b)?;
    }
    if let Some(c) = res.cpu() {
        cpu::apply(fs, dir, c)?;
    }
    // A create always gets a filter (the defaults without rules); an
    // update changes it only when it brings rules.
    match (mode, res.devices().as_deref()) {
        (Mode::Update, None) => {}
        (_, rules) => devices::apply_v2(fs, dir, rules.unwrap_or(&[]))?,
    }
    if let Some(c) = res.cpu() {
        cpu::cpuset(fs, dir, c)?;
    }
    if let Some(h) = res.hugepage_limits().as_ref().filter(|h| !h.is_empty()) {
        need(fs, dir, "hugetlb")?;
        let mut rsvd = true;
        for l in h {
            let v = l.limit().to_string();
            write(fs, dir, &format!("hugetlb.{}.max", l.page_size()), &v)?;
            // Reservations too (kernel >= 5.7), as runc does.
            let f = format!("hugetlb.{}.rsvd.max", l.page_size());
            if rsvd && !ctl::write_if_exists(fs, dir, &f, &v)? {
                rsvd = false;
            }
        }
    }
    if let Some(r) = res.rdma().as_ref().filter(|r| !r.is_empty()) {
        need(fs, dir, "rdma")?;
        let mut devs: Vec<_> = r.iter().collect();
        devs.sort_by_key(|(k, _)| k.as_str());
        for (dev, l) in devs {
            write(fs, dir, "rdma.max", &rdma_line(dev, l))?;
        }
    }
    if let Some(n) = res.network() {
        if n.class_id().is_some() || n.priorities().as_ref().is_some_and(|p| !p.is_empty()) {
            return Err(Error::Unimplemented(
                "linux.resources.network (net_cls/net_prio do not exist on cgroup v2)".into(),
            ));
        }
    }
    for (k, v) in sorted_unified(res) {
        unified(fs, dir, k, v)?;
    }
    Ok(())
}

fn sorted_unified(res: &LinuxResources) -> Vec<(&String, &String)> {
    let mut u: Vec<_> = res.unified().iter().flatten().collect();
    u.sort();
    u
}

/// One `unified` key (validated earlier): each line is its own write, as
/// runc writes them. A refused write names a missing controller.
fn unified(fs: &dyn CgroupFs, dir: &Path, key: &str, value: &str) -> Result<()> {
    let ctrl = key.split('.').next().unwrap_or(key);
    if ctrl != "cgroup" && !fs.exists(&dir.join(key)) {
        let have = ctl::read(fs, dir, "cgroup.controllers").unwrap_or_default();
        if !have.split_whitespace().any(|c| c == ctrl) {
            return Err(Error::InvalidResource {
                field: "unified",
                reason: format!("key {key:?}: controller {ctrl:?} is not delegated to this cgroup"),
            });
        }
    }
    for line in value.split('\n').filter(|l| !l.is_empty()) {
        write(fs, dir, key, line)?;
    }
    Ok(())
}

/// Keys of `unified` a spec may not write: they move processes, change the
/// tree's shape, or fight rund's own use of the file.
const UNIFIED_REFUSED: &[&str] = &[
    "cgroup.procs",
    "cgroup.threads",
    "cgroup.subtree_control",
    "cgroup.type",
    "cgroup.kill",
    "cgroup.freeze",
];

/// Checks of `unified` keys that do not need the kernel.
pub(super) fn validate_unified(res: &LinuxResources) -> Result<()> {
    for (k, v) in res.unified().iter().flatten() {
        let bad = |why: &str| Error::InvalidResource {
            field: "unified",
            reason: format!("key {k:?}: {why}"),
        };
        let Some((ctrl, param)) = k.split_once('.') else {
            return Err(bad("must be a file name of the form CONTROLLER.PARAMETER"));
        };
        if ctrl.is_empty() || param.is_empty() || k.contains(['/', '\0', '\n']) {
            return Err(bad("must be a file name of the form CONTROLLER.PARAMETER"));
        }
        if UNIFIED_REFUSED.contains(&k.as_str()) {
            return Err(bad("is managed by rund and cannot be set from the spec"));
        }
        if v.contains('\0') {
            return Err(bad("the value contains a NUL byte"));
        }
    }
    Ok(())
}
