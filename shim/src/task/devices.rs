//! Device injection at Create: resolve what the spec asks for (GPUs, RDMA,
//! CDI), edit the spec, gate RDMA devices on a passing write_bw check, and
//! work out the memlock default.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use oci_spec::runtime::{PosixRlimit, Spec};
use rund_check::{Gate, Verify};
use rund_proto::fdpass::FdKind;

use super::Service;
use crate::error::{Result, ShimError};
use crate::rlimit::memlock;

pub struct Prepared {
    /// The spec's rlimits plus the memlock default.
    pub rlimits: Vec<PosixRlimit>,
    /// Device nodes to bind-mount (user namespaces), as detached mounts.
    pub device_fds: Vec<(FdKind, OwnedFd)>,
    /// What was injected and verified, for the log.
    pub notes: Vec<String>,
}

/// Edits `spec` in place; nothing is created on the host.
pub async fn prepare(svc: &Arc<Service>, spec: &mut Spec, userns: bool) -> Result<Prepared> {
    let config = svc.config();
    let cfg = config.devices.clone();
    let mut edited = spec.clone();
    let (req, report) = tokio::task::spawn_blocking(move || {
        rund_devices::prepare_spec(&cfg, &mut edited, userns).map(|(r, rep)| (r, rep, edited))
    })
    .await
    .map_err(|e| ShimError::Internal(e.to_string()))?
    .map(|(r, rep, edited)| {
        *spec = edited;
        (r, rep)
    })?;
    let mut notes = Vec::new();
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
            let gate = Gate::new(&config.checks);
            let policy = config.verify.clone();
            let name = dev.clone();
            let outcome = tokio::task::spawn_blocking(move || gate.ensure(&name, &policy))
                .await
                .map_err(|e| ShimError::Internal(e.to_string()))??;
            notes.push(outcome.summary());
        }
    }

    let process = spec.process().clone().unwrap_or_default();
    let rlimits = memlock::with_default(
        &process.rlimits().clone().unwrap_or_default(),
        crate::spec::annotation(spec, memlock::ANN_MEMLOCK),
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
            return Err(ShimError::InvalidArgument(format!(
                "device {path}: host node {} does not exist to bind into the user namespace",
                host.display()
            )));
        }
        out.push((
            FdKind::Device(path),
            crate::rootfs::open_tree_clone(&host, false)?,
        ));
    }
    Ok(out)
}
