//! Host facts for `rund doctor`: limits, capabilities, cgroups, user namespaces, devices.
//! Parsing is split from reading so the parsers can be unit-tested.

use std::path::Path;

use rund_cgroup::{Hierarchy, Switch};
use serde::Serialize;

use super::memlock::{cap_bit, Limit, CAP_SYS_RESOURCE};
use crate::cli::error::CliError;
use crate::config::RundConfig;

/// RLIMIT_MEMLOCK and CAP_SYS_RESOURCE of one process.
#[derive(Debug, Clone, Serialize)]
pub struct MemlockFacts {
    /// The inspected process (`self` or a pid).
    pub process: String,
    pub soft: Limit,
    pub hard: Limit,
    pub cap_sys_resource_effective: bool,
    pub cap_sys_resource_bounding: bool,
    /// setrlimit checks the effective set.
    pub can_raise_hard: bool,
}

fn read(path: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Probe {
        what: path.into(),
        source,
    })
}

/// `pid` 0 is this process.
pub fn memlock(pid: i32) -> Result<MemlockFacts, CliError> {
    let (soft, hard) = crate::rlimit::get(pid, "RLIMIT_MEMLOCK")?;
    let (process, status_path) = if pid == 0 {
        ("self".to_string(), "/proc/self/status".to_string())
    } else {
        (pid.to_string(), format!("/proc/{pid}/status"))
    };
    let status = read(&status_path)?;
    let bit = |field: &str| {
        cap_bit(&status, field, CAP_SYS_RESOURCE).ok_or_else(|| CliError::Probe {
            what: format!("{field} in {status_path}"),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "missing or not hex"),
        })
    };
    let eff = bit("CapEff")?;
    Ok(MemlockFacts {
        process,
        soft: Limit::from_raw(soft),
        hard: Limit::from_raw(hard),
        cap_sys_resource_effective: eff,
        cap_sys_resource_bounding: bit("CapBnd")?,
        can_raise_hard: eff,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct CgroupFacts {
    /// `v1`, `v1-hybrid`, `v2`, or `unknown`.
    pub mode: String,
    pub detail: String,
    pub pool: Switch,
    /// What the pool does on this node (v2: why there is none).
    pub pool_effect: Vec<String>,
}

pub fn cgroup(cfg: &RundConfig) -> CgroupFacts {
    let (mode, detail) = match Hierarchy::detect() {
        Ok(Hierarchy::V1 {
            hierarchies,
            unified,
        }) => {
            let n = hierarchies.len();
            match unified {
                Some(u) => (
                    "v1-hybrid",
                    format!("{n} v1 hierarchies, cgroup2 at {}", u.display()),
                ),
                None => ("v1", format!("{n} v1 hierarchies")),
            }
        }
        Ok(Hierarchy::V2 { root }) => ("v2", format!("cgroup2 at {}", root.display())),
        Err(e) => ("unknown", e.to_string()),
    };
    CgroupFacts {
        pool_effect: crate::cli::pool::explain(&cfg.cgroup, mode == "v2"),
        mode: mode.into(),
        detail,
        pool: cfg.cgroup.pool,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct UsernsFacts {
    pub max_user_namespaces: Option<u64>,
    pub available: bool,
    /// `[userns]`: which pods are remapped, and the exemptions.
    pub mode: crate::config::RemapMode,
    pub on_privileged: crate::config::OnPrivileged,
    pub on_unsupported: crate::config::OnUnsupported,
    pub kernel: String,
    /// mount_setattr(MOUNT_ATTR_IDMAP) exists from 5.12 on (filesystem support varies).
    pub idmapped_mounts: bool,
}

/// `(major, minor)` of a kernel release such as `6.18.0-rc1+`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(['.', '-', '+']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn userns(cfg: &RundConfig) -> UsernsFacts {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    UsernsFacts {
        max_user_namespaces: max,
        available: max.is_some_and(|m| m > 0),
        mode: cfg.userns.mode,
        on_privileged: cfg.userns.on_privileged,
        on_unsupported: cfg.userns.on_unsupported,
        idmapped_mounts: kernel_version(&kernel).is_some_and(|v| v >= (5, 12)),
        kernel,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceFacts {
    pub nvml_available: bool,
    /// Library and driver version, or why NVML could not be loaded.
    pub nvml: String,
    pub gpus: usize,
    pub rdma_devices: Vec<String>,
    pub rdma_sysfs: String,
}

pub fn devices(cfg: &RundConfig) -> DeviceFacts {
    let d = &cfg.devices;
    let (nvml_available, nvml, gpus) = match rund_devices::gpu::probe_nvml(d) {
        Ok(p) => {
            let drv = p.driver_version.as_deref().unwrap_or("?");
            (true, format!("{} (driver {drv})", p.library), p.gpus.len())
        }
        Err(rund_devices::DeviceError::NvmlUnavailable { library, reason }) => {
            (false, format!("unavailable ({library}): {reason}"), 0)
        }
        Err(e) => (false, e.to_string(), 0),
    };
    let rdma_devices = rund_devices::discover_rdma(d)
        .into_iter()
        .map(|r| r.name)
        .collect();
    DeviceFacts {
        nvml_available,
        nvml,
        gpus,
        rdma_devices,
        rdma_sysfs: Path::new(&d.sysfs_root)
            .join("class/infiniband")
            .display()
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.0-rc1+\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.12"), Some((5, 12)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert!(kernel_version("5.4.0").unwrap() < (5, 12));
        assert_eq!(kernel_version("garbage"), None);
    }
}
