//! Edits to the OCI spec: `linux.devices`, device cgroup allow rules, read-only binds, env,
//! then CDI edits. All on a copy: on any error the caller's spec is untouched.

use std::path::PathBuf;

use oci_spec::runtime::{
    LinuxBuilder, LinuxDeviceBuilder, LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType,
    LinuxResourcesBuilder, MountBuilder, Spec,
};
use serde::Serialize;

use crate::cdi::apply_cdi;
use crate::devnode::DeviceNode;
use crate::error::{DeviceError, Result};
use crate::resolve::{BindMount, Resolved};

/// Options of the read-only driver-file binds.
pub const BIND_RO_OPTIONS: [&str; 4] = ["rbind", "ro", "nosuid", "nodev"];

/// One device node the container gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InjectedDevice {
    /// Path in the container.
    pub path: String,
    /// Host node to bind-mount when `bind_mount_devices` is true.
    pub host_path: PathBuf,
    pub major: i64,
    pub minor: i64,
    /// `gpu`, `rdma` (rund's own resolution) or `cdi`.
    pub origin: &'static str,
}

/// What `inject` did, for the shim and for logs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InjectionReport {
    pub devices: Vec<InjectedDevice>,
    pub mounts: Vec<BindMount>,
    /// Env keys set (values are in the spec).
    pub env: Vec<String>,
    pub cdi_devices: Vec<String>,
    /// The container runs in a user namespace: mknod is impossible there, so every entry
    /// of `devices` must be bind-mounted from `host_path` onto `path` by the shim/agent
    /// (the nodes stay listed in `linux.devices` for the cgroup rules and for the record).
    pub bind_mount_devices: bool,
    /// GPUs and RDMA devices by name, for logs.
    pub gpus: Vec<String>,
    pub rdma_devices: Vec<String>,
    pub warnings: Vec<String>,
}

fn err(what: &str, e: impl std::fmt::Display) -> DeviceError {
    DeviceError::Spec(format!("{what}: {e}"))
}

fn add_device(spec: &mut Spec, n: &DeviceNode) -> Result<()> {
    let dev = LinuxDeviceBuilder::default()
        .path(n.path.clone())
        .typ(LinuxDeviceType::C)
        .major(n.major)
        .minor(n.minor)
        .file_mode(n.file_mode)
        .build()
        .map_err(|e| err("linux device", e))?;
    let rule = LinuxDeviceCgroupBuilder::default()
        .allow(true)
        .typ(LinuxDeviceType::C)
        .major(n.major)
        .minor(n.minor)
        .access("rwm")
        .build()
        .map_err(|e| err("device cgroup rule", e))?;
    let linux = match spec.linux_mut() {
        Some(l) => l,
        None => {
            spec.set_linux(Some(
                LinuxBuilder::default()
                    .build()
                    .map_err(|e| err("linux", e))?,
            ));
            spec.linux_mut().as_mut().expect("just set")
        }
    };
    let devices = linux.devices_mut().get_or_insert_with(Vec::new);
    devices.retain(|d| d.path() != &PathBuf::from(&n.path));
    devices.push(dev);
    if linux.resources().is_none() {
        linux.set_resources(Some(
            LinuxResourcesBuilder::default()
                .build()
                .map_err(|e| err("linux resources", e))?,
        ));
    }
    let resources = linux.resources_mut().as_mut().expect("just set");
    let rules: &mut Vec<LinuxDeviceCgroup> = resources.devices_mut().get_or_insert_with(Vec::new);
    if !rules.contains(&rule) {
        rules.push(rule);
    }
    Ok(())
}

fn add_mount(spec: &mut Spec, m: &BindMount) -> Result<()> {
    let mount = MountBuilder::default()
        .destination(m.destination.clone())
        .typ("bind")
        .source(m.source.clone())
        .options(BIND_RO_OPTIONS.map(String::from).to_vec())
        .build()
        .map_err(|e| err("mount", e))?;
    let mounts = spec.mounts_mut().get_or_insert_with(Vec::new);
    mounts.retain(|x| x.destination() != &m.destination);
    mounts.push(mount);
    Ok(())
}

fn set_env(spec: &mut Spec, key: &str, value: &str) -> Result<()> {
    let process = spec
        .process_mut()
        .as_mut()
        .ok_or_else(|| err("env", "spec has no process"))?;
    let env = process.env_mut().get_or_insert_with(Vec::new);
    let prefix = format!("{key}=");
    env.retain(|kv| !kv.starts_with(&prefix));
    env.push(format!("{key}={value}"));
    Ok(())
}

/// Applies `resolved` to `spec`. On error `spec` is unchanged.
pub fn inject(spec: &mut Spec, resolved: &Resolved, userns: bool) -> Result<InjectionReport> {
    let mut work = spec.clone();
    let mut report = InjectionReport {
        bind_mount_devices: userns,
        warnings: resolved.warnings.clone(),
        gpus: resolved.gpus.iter().map(|g| g.uuid.clone()).collect(),
        rdma_devices: resolved.rdma.iter().map(|d| d.name.clone()).collect(),
        ..Default::default()
    };
    let gpu_paths: Vec<&str> = resolved.gpus.iter().map(|g| g.node.path.as_str()).collect();
    for n in &resolved.nodes {
        add_device(&mut work, n)?;
        let origin = if n.path.starts_with("/dev/nvidia") || gpu_paths.contains(&n.path.as_str()) {
            "gpu"
        } else {
            "rdma"
        };
        report.devices.push(InjectedDevice {
            path: n.path.clone(),
            host_path: n.host_path.clone(),
            major: n.major,
            minor: n.minor,
            origin,
        });
    }
    for m in &resolved.mounts {
        add_mount(&mut work, m)?;
        report.mounts.push(m.clone());
    }
    for (k, v) in &resolved.env {
        set_env(&mut work, k, v)?;
        report.env.push(k.clone());
    }
    for node in apply_cdi(&mut work, &resolved.cdi)? {
        let dev = work
            .linux()
            .as_ref()
            .and_then(|l| l.devices().as_ref())
            .and_then(|ds| ds.iter().find(|d| d.path() == &PathBuf::from(&node.path)))
            .ok_or_else(|| {
                err(
                    "CDI",
                    format!("device {} missing after CDI edits", node.path),
                )
            })?;
        report.devices.retain(|d| d.path != node.path);
        report.devices.push(InjectedDevice {
            major: dev.major(),
            minor: dev.minor(),
            path: node.path,
            host_path: node.host_path,
            origin: "cdi",
        });
    }
    report.cdi_devices = resolved.cdi.iter().map(|c| c.name.clone()).collect();
    *spec = work;
    Ok(report)
}

#[cfg(test)]
mod tests;
