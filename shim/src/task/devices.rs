//! Device injection at Create: resolve what the spec asks for (GPUs, RDMA,
//! CDI), edit the spec, gate RDMA devices on a passing write_bw check, and
//! work out the memlock default.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use std::collections::HashMap;

use oci_spec::runtime::{PosixRlimit, PosixRlimitType, Spec};
use rund_check::{Gate, HelperChecker, Verify};
use rund_proto::fdpass::FdKind;

use super::Service;
use super::TaskError;
use crate::error::{Result, ShimError};
use crate::policy;
use crate::rlimit::memlock;
use crate::spec::Role;
use rund_devices::gpu::NvmlHelper;
use rund_devices::{DeviceRequest, InjectionReport};

/// NVML and libibverbs are loaded with dlopen, which the static shim must
/// not do: GPU discovery and the write_bw gate's run happen in the dynamic
/// `rund` binary. A wedged driver or device costs the Create at most this.
const NVML_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
const WRITE_BW_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

pub struct Prepared {
    /// The spec's rlimits plus the memlock default.
    pub rlimits: Vec<PosixRlimit>,
    /// Device nodes to bind-mount (user namespaces), as detached mounts.
    pub device_fds: Vec<(FdKind, OwnedFd)>,
    /// What was injected and verified, for the log.
    pub notes: Vec<String>,
}

/// Edits `spec` in place; nothing is created on the host. What the spec
/// asks for passes the node's `[policy]` first (policy/devices.rs).
pub async fn prepare(svc: &Arc<Service>, spec: &mut Spec, userns: bool) -> Result<Prepared> {
    let config = svc.config();
    let request = DeviceRequest::from_spec(spec)?;
    let pod = pod_annotations(svc, spec).await;
    let admitted = policy::devices::admit(&config.policy, spec, pod.as_ref(), request)?;
    let mut notes = admitted.notes.clone();
    let cfg = config.devices.clone();
    let rules = config.policy.clone();
    let helper = config.helper_binary();
    let mut edited = spec.clone();
    let (req, report) = tokio::task::spawn_blocking(move || -> Result<_> {
        let req = admitted.request.clone();
        if req.is_empty() {
            return Ok((req, InjectionReport::default(), edited));
        }
        let gpus = NvmlHelper {
            program: helper,
            deadline: NVML_DEADLINE,
        };
        let resolved = rund_devices::resolve_with(&cfg, &req, &gpus)?;
        policy::devices::check_resolved(&rules, &admitted, &resolved)?;
        let report = rund_devices::inject(&mut edited, &resolved, userns)?;
        Ok((req, report, edited))
    })
    .await
    .map_err(TaskError::blocking("device injection"))?
    .map(|(r, rep, edited)| {
        *spec = edited;
        (r, rep)
    })?;
    if !report.gpus.is_empty() || !report.rdma_devices.is_empty() || !report.cdi_devices.is_empty()
    {
        notes.push(format!(
            "devices: gpus {:?}, rdma {:?}, cdi {:?}",
            report.gpus, report.rdma_devices, report.cdi_devices
        ));
    }
    notes.extend(report.warnings.iter().cloned());

    if config.verify.verify != Verify::Off {
        for dev in &report.rdma_devices {
            let checker = HelperChecker {
                program: config.helper_binary(),
                sysfs_root: "/sys".into(),
                deadline: WRITE_BW_DEADLINE,
            };
            let gate = Gate::with_checker(&config.checks, Arc::new(checker));
            let policy = config.verify.clone();
            let name = dev.clone();
            let outcome = tokio::task::spawn_blocking(move || gate.ensure(&name, &policy))
                .await
                .map_err(TaskError::blocking("device gate"))??;
            notes.push(outcome.summary());
        }
    }

    let process = spec.process().clone().unwrap_or_default();
    let limits = process.rlimits().clone().unwrap_or_default();
    let annotation = crate::spec::annotation(spec, rund_annotations::MEMLOCK);
    // An explicit RLIMIT_MEMLOCK (the runtime spec's, not the pod author's) wins.
    if !limits
        .iter()
        .any(|l| l.typ() == PosixRlimitType::RlimitMemlock)
    {
        let inherited = policy::limits::inherited_memlock();
        policy::limits::check_memlock(&config.policy, annotation, inherited).map_err(
            |e| match e {
                policy::limits::LimitError::Bad(e) => ShimError::from(e),
                policy::limits::LimitError::Refused(e) => ShimError::from(e),
            },
        )?;
    }
    let rlimits = memlock::with_default(
        &limits,
        annotation,
        req.wants_rdma(),
        &config.memlock.rdma_default,
    )?;

    let device_fds = if userns {
        device_binds(spec, &report)?
    } else {
        Vec::new()
    };
    Ok(Prepared {
        rlimits,
        device_fds,
        notes,
    })
}

/// The annotations of the pod's sandbox spec, which carries pod annotations
/// only (`None` for a standalone container, its own sandbox).
async fn pod_annotations(svc: &Service, spec: &Spec) -> Option<HashMap<String, String>> {
    let Role::PodContainer { sandbox_id } = crate::spec::role(spec) else {
        return None;
    };
    let sandbox = svc.containers.lock().await.get(&sandbox_id).cloned();
    // The pod's sandbox runs in this shim (Create checked); if its spec were
    // unknown, every CDI annotation would count as the pod's.
    Some(
        sandbox
            .and_then(|c| c.spec.annotations().clone())
            .unwrap_or_else(|| spec.annotations().clone().unwrap_or_default()),
    )
}

/// The devices every container gets (OCI's default set).
const DEFAULT_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Under a user namespace mknod is refused: every device node (the defaults,
/// the spec's and the injected ones) is bind-mounted from the host instead.
fn device_binds(
    spec: &Spec,
    report: &rund_devices::InjectionReport,
) -> Result<Vec<(FdKind, OwnedFd)>> {
    let mut paths: Vec<(String, std::path::PathBuf)> = DEFAULT_DEVICES
        .iter()
        .map(|p| (p.to_string(), p.into()))
        .collect();
    let spec_devices = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().clone())
        .unwrap_or_default();
    for d in spec_devices {
        let path = d.path().display().to_string();
        let host = report
            .devices
            .iter()
            .find(|i| i.path == path)
            .map(|i| i.host_path.clone())
            .unwrap_or_else(|| d.path().clone());
        paths.retain(|(p, _)| *p != path);
        paths.push((path, host));
    }
    let mut out = Vec::new();
    for (path, host) in paths {
        if !host.exists() {
            return Err(TaskError::NoHostDevice { path, host }.into());
        }
        out.push((
            FdKind::Device(path),
            crate::rootfs::open_tree_clone(&host, false)?,
        ));
    }
    Ok(out)
}
