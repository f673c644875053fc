//! Applying OCI `LinuxResources` to a cgroup, on v1 and v2.

pub(crate) mod devices;
mod v1;
mod v2;

pub use devices::{allow_rules_for_devices, is_allow_all, DEFAULT_ALLOWED_DEVICES};
pub use v2::shares_to_weight;

use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use oci_spec::runtime::{LinuxRdma, LinuxResources};

/// Create-time apply versus a live update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// First apply: device rules are always set (deny by default).
    Create,
    /// First apply on a pool slot whose devices already hold the baseline
    /// (deny all, then the defaults): only the rules beyond it are written.
    CreateOnBaseline,
    /// Live update: only the fields present change.
    Update,
}

/// Validate, then write every resource present in `res`.
pub fn apply(fs: &dyn CgroupFs, dirs: &Dirs, res: &LinuxResources, mode: Mode) -> Result<()> {
    validate(res)?;
    match dirs {
        Dirs::V1(_) => v1::apply(fs, dirs, res, mode),
        Dirs::V2(dir) => v2::apply(fs, dir, res, mode),
    }
}

/// One `rdma.max` line (the same on v1 and v2): `dev hca_handle=N hca_object=M`.
pub(crate) fn rdma_line(dev: &str, l: &LinuxRdma) -> String {
    let mut s = dev.to_string();
    if let Some(h) = l.hca_handles() {
        s.push_str(&format!(" hca_handle={h}"));
    }
    if let Some(o) = l.hca_objects() {
        s.push_str(&format!(" hca_object={o}"));
    }
    s
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidResource {
        field,
        reason: reason.into(),
    }
}

/// Checks that do not need the kernel. The kernel still has the last word
/// (for example a limit below usage), reported as [`Error::Write`].
pub fn validate(res: &LinuxResources) -> Result<()> {
    if let Some(m) = res.memory() {
        for (field, v) in [
            ("memory.limit", m.limit()),
            ("memory.reservation", m.reservation()),
            ("memory.swap", m.swap()),
            ("memory.kernel", m.kernel()),
            ("memory.kernelTCP", m.kernel_tcp()),
        ] {
            if let Some(v) = v {
                if v < -1 {
                    return Err(invalid(field, format!("{v} (use -1 for unlimited)")));
                }
            }
        }
        if let (Some(l), Some(s)) = (m.limit(), m.swap()) {
            if l > 0 && s > 0 && s < l {
                return Err(invalid(
                    "memory.swap",
                    format!("{s} is below memory.limit {l} (swap is memory+swap)"),
                ));
            }
        }
        if let Some(sw) = m.swappiness() {
            if sw > 100 {
                return Err(invalid("memory.swappiness", format!("{sw} (0..=100)")));
            }
        }
    }
    if let Some(c) = res.cpu() {
        if let Some(s) = c.shares() {
            if s != 0 && !(2..=262_144).contains(&s) {
                return Err(invalid("cpu.shares", format!("{s} (2..=262144)")));
            }
        }
        if let Some(q) = c.quota() {
            if q != -1 && q != 0 && q < 1000 {
                return Err(invalid("cpu.quota", format!("{q} (-1 or >= 1000 µs)")));
            }
        }
        if let Some(p) = c.period() {
            if p != 0 && !(1000..=1_000_000).contains(&p) {
                return Err(invalid("cpu.period", format!("{p} (1000..=1000000 µs)")));
            }
        }
        for (field, v) in [("cpu.cpus", c.cpus()), ("cpu.mems", c.mems())] {
            if let Some(v) = v {
                check_list(v).map_err(|r| invalid(field, r))?;
            }
        }
    }
    if let Some(b) = res.block_io() {
        if let Some(w) = b.weight() {
            if w != 0 && !(10..=1000).contains(&w) {
                return Err(invalid("blockIO.weight", format!("{w} (10..=1000)")));
            }
        }
    }
    for h in res.hugepage_limits().iter().flatten() {
        let ps = h.page_size();
        if ps.is_empty() || !ps.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(invalid(
                "hugepageLimits.pageSize",
                format!("{ps:?} (like 2MB or 1GB)"),
            ));
        }
    }
    for dev in res.rdma().iter().flatten().map(|(k, _)| k) {
        if dev.is_empty() || dev.contains(|c: char| c.is_whitespace() || c == '\0' || c == '/') {
            return Err(invalid("rdma", format!("device name {dev:?}")));
        }
    }
    v2::validate_unified(res)?;
    // The device rules as a whole (runc refuses some lists v1 would accept).
    devices::emulate(res.devices().as_deref().unwrap_or(&[]))?;
    Ok(())
}

/// A cpuset list such as `0-3,7`.
fn check_list(s: &str) -> std::result::Result<(), String> {
    if s.trim().is_empty() {
        return Ok(());
    }
    for part in s.trim().split(',') {
        let ok = match part.split_once('-') {
            Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                (Ok(a), Ok(b)) => a <= b,
                _ => false,
            },
            None => part.parse::<u32>().is_ok(),
        };
        if !ok {
            return Err(format!("{s:?} is not a list like 0-3,7"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxResourcesBuilder};

    #[test]
    fn validation() {
        let ok = LinuxResourcesBuilder::default()
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(1 << 20)
                    .swap(2 << 20)
                    .build()
                    .unwrap(),
            )
            .cpu(
                LinuxCpuBuilder::default()
                    .shares(512u64)
                    .cpus("0-1,3")
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        validate(&ok).unwrap();
        let bad = [
            LinuxResourcesBuilder::default()
                .memory(LinuxMemoryBuilder::default().limit(-5).build().unwrap())
                .build()
                .unwrap(),
            LinuxResourcesBuilder::default()
                .memory(
                    LinuxMemoryBuilder::default()
                        .limit(4096)
                        .swap(1024)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
            LinuxResourcesBuilder::default()
                .cpu(LinuxCpuBuilder::default().shares(1u64).build().unwrap())
                .build()
                .unwrap(),
            LinuxResourcesBuilder::default()
                .cpu(LinuxCpuBuilder::default().cpus("0-x").build().unwrap())
                .build()
                .unwrap(),
            LinuxResourcesBuilder::default()
                .cpu(LinuxCpuBuilder::default().quota(5i64).build().unwrap())
                .build()
                .unwrap(),
        ];
        for b in bad {
            let e = validate(&b).unwrap_err();
            assert!(matches!(e, Error::InvalidResource { .. }), "{e}");
        }
    }
}
