//! `rund doctor`: what this node gives rund's pods, and what to fix.

pub mod memlock;
pub mod policy;
pub mod probe;

use std::io::Write;

use serde::Serialize;

use crate::cli::error::CliError;
use crate::config::{RundConfig, ShimMode};
use memlock::{memlock_verdict, MemlockPolicy, MemlockVerdict};
use probe::{CgroupFacts, DeviceFacts, MemlockFacts, UsernsFacts};

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub memlock: MemlockFacts,
    pub memlock_policy: MemlockPolicy,
    /// What RDMA pods without an explicit RLIMIT_MEMLOCK get.
    pub rdma_pods: MemlockVerdict,
    pub cgroup: CgroupFacts,
    pub userns: UsernsFacts,
    pub devices: DeviceFacts,
    /// `[policy]` in force: the privileged requests pods may make.
    pub policy: crate::config::PolicyConfig,
    /// `[shim] mode`: a shim process per pod, or one per node.
    pub shim: ShimMode,
    /// `[sandbox] warm`: agents a node's shim launches ahead of pods.
    pub warm: usize,
}

/// Gathers the report; `pid` 0 inspects this process (pass containerd's pid
/// to see exactly what its shims inherit).
pub fn collect(cfg: &RundConfig, pid: i32) -> Result<Report, CliError> {
    let policy = MemlockPolicy::from_config(&cfg.memlock)
        .map_err(|e| CliError::ConfigValue(e.to_string()))?;
    let memlock = probe::memlock(pid)?;
    let rdma_pods = memlock_verdict(policy, memlock.hard, memlock.can_raise_hard);
    Ok(Report {
        memlock,
        memlock_policy: policy,
        rdma_pods,
        cgroup: probe::cgroup(cfg),
        userns: probe::userns(cfg),
        devices: probe::devices(cfg),
        policy: cfg.policy.clone(),
        shim: cfg.shim.mode,
        warm: cfg.sandbox.warm,
    })
}

/// What `[shim] mode` means for the node's pods.
fn shim_line(mode: ShimMode) -> &'static str {
    match mode {
        ShimMode::PerPod => "per-pod: one shim process per pod",
        ShimMode::PerNode => {
            "per-node: one shim process serves every pod of a containerd namespace \
             (a crash of it ends them all)"
        }
    }
}

/// What `[sandbox] warm` does in this shim mode.
fn warm_line(mode: ShimMode, warm: usize) -> String {
    match (mode, warm) {
        (_, 0) => "warm = 0: every sandbox starts cold".into(),
        (ShimMode::PerPod, n) => format!(
            "warm = {n}, unused: warm sandboxes need [shim] mode = \"per-node\" (a per-pod shim lives no longer than its pod)"
        ),
        (ShimMode::PerNode, n) => format!(
            "warm = {n}: the node's shim keeps {n} agents ready; pods without a user namespace or hostPID claim one"
        ),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

pub fn render(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let m = &r.memlock;
    writeln!(out, "memlock ({}):", m.process)?;
    writeln!(
        out,
        "  RLIMIT_MEMLOCK      soft {}, hard {}",
        m.soft, m.hard
    )?;
    let why = match (m.cap_sys_resource_effective, m.cap_sys_resource_bounding) {
        (true, _) => "the hard limit can be raised",
        (false, true) => "the hard limit cannot be raised by this process",
        (false, false) => "the hard limit cannot be raised (not even by a new root process)",
    };
    writeln!(
        out,
        "  CAP_SYS_RESOURCE    effective {}, bounding {} -> {why}",
        yes_no(m.cap_sys_resource_effective),
        yes_no(m.cap_sys_resource_bounding)
    )?;
    writeln!(out, "  RDMA pods           {}", r.rdma_pods.message)?;
    if let Some(fix) = &r.rdma_pods.fix {
        writeln!(out, "  fix                 {fix}")?;
    }
    let c = &r.cgroup;
    let pool = match c.pool {
        rund_cgroup::Switch::On => "on",
        rund_cgroup::Switch::Off => "off",
    };
    writeln!(
        out,
        "cgroup:               {} ({}); pool {pool}",
        c.mode, c.detail
    )?;
    for line in &c.pool_effect {
        writeln!(out, "  pool                {line}")?;
    }
    writeln!(out, "shim:                 {}", shim_line(r.shim))?;
    writeln!(out, "warm sandboxes:       {}", warm_line(r.shim, r.warm))?;
    let u = &r.userns;
    let max = u
        .max_user_namespaces
        .map_or("unreadable".to_string(), |v| v.to_string());
    let avail = if u.available {
        "available"
    } else {
        "UNAVAILABLE"
    };
    writeln!(
        out,
        "user namespaces:      {avail} (max_user_namespaces {max}); {}",
        policy::userns_line(u)
    )?;
    let idm = if u.idmapped_mounts {
        "supported"
    } else {
        "unsupported"
    };
    writeln!(
        out,
        "idmapped mounts:      {idm} (kernel {}; needs >= 5.12)",
        u.kernel
    )?;
    let d = &r.devices;
    if d.nvml_available {
        writeln!(out, "NVML:                 {}; {} GPU(s)", d.nvml, d.gpus)?;
    } else {
        writeln!(out, "NVML:                 {}", d.nvml)?;
    }
    if d.rdma_devices.is_empty() {
        writeln!(out, "RDMA:                 no devices ({})", d.rdma_sysfs)?;
    } else {
        writeln!(out, "RDMA:                 {}", d.rdma_devices.join(", "))?;
    }
    policy::render(&r.policy, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_mode_is_named_with_what_it_means() {
        assert!(shim_line(ShimMode::PerPod).starts_with("per-pod:"));
        let node = shim_line(ShimMode::PerNode);
        assert!(
            node.starts_with("per-node:") && node.contains("crash"),
            "{node}"
        );
        assert!(warm_line(ShimMode::PerPod, 2).contains("unused"));
        assert!(warm_line(ShimMode::PerNode, 2).contains("keeps 2 agents"));
        assert!(warm_line(ShimMode::PerNode, 0).contains("cold"));
        let json = serde_json::to_string(&ShimMode::PerNode).unwrap();
        assert_eq!(json, "\"per-node\"");
    }
}
