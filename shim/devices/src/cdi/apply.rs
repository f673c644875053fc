//! Applying CDI container edits to the OCI spec, as the CDI reference implementation does:
//! env by name, device nodes (type and numbers from the host node when missing) with their
//! cgroup rule, mounts and device nodes replacing ones at the same container path, hooks by
//! name, additional GIDs.

use std::collections::HashSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use oci_spec::runtime::{
    Hook, HookBuilder, Hooks, LinuxBuilder, LinuxDevice, LinuxDeviceBuilder,
    LinuxDeviceCgroupBuilder, LinuxDeviceType, LinuxResources, Mount, MountBuilder, Spec,
};
use serde::{Deserialize, Serialize};

use super::schema::{self, ContainerEdits};
use super::ResolvedCdi;
use crate::error::{DeviceError, Result};

/// A device node a CDI device asks for: where it is in the container and on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdiNodeInfo {
    pub path: String,
    pub host_path: PathBuf,
}

/// The edits of all devices, each spec file's global edits counted once.
fn merged_edits(resolved: &[ResolvedCdi]) -> ContainerEdits {
    let mut edits = ContainerEdits::default();
    let mut seen = HashSet::new();
    for r in resolved {
        if seen.insert(r.spec_path.clone()) {
            if let Some(se) = &r.spec_edits {
                edits.append(se);
            }
        }
        edits.append(&r.device_edits);
    }
    edits
}

fn device_type(t: &str) -> LinuxDeviceType {
    match t {
        "b" => LinuxDeviceType::B,
        "u" => LinuxDeviceType::U,
        "p" => LinuxDeviceType::P,
        _ => LinuxDeviceType::C,
    }
}

/// Type, major and minor of the node, read from the host node when the spec leaves them out.
fn node_numbers(n: &schema::DeviceNode) -> std::result::Result<(String, i64, i64), String> {
    let host = n.host_path.as_deref().unwrap_or(&n.path);
    let typ = n.typ.clone().filter(|t| !t.is_empty());
    if let Some(t) = &typ {
        if n.major.is_some() || t == "p" {
            return Ok((t.clone(), n.major.unwrap_or(0), n.minor.unwrap_or(0)));
        }
    }
    let md = std::fs::metadata(host).map_err(|e| format!("device node {host}: {e}"))?;
    let ft = md.file_type();
    let found = if ft.is_char_device() {
        "c"
    } else if ft.is_block_device() {
        "b"
    } else if ft.is_fifo() {
        "p"
    } else {
        return Err(format!("{host} is not a device node"));
    };
    if let Some(t) = &typ {
        if t != found && !(t == "u" && found == "c") {
            return Err(format!(
                "device node {} is of type {t} but {host} is of type {found}",
                n.path
            ));
        }
    }
    let rdev = md.rdev();
    let major = i64::from(nix::sys::stat::major(rdev) as u32);
    let minor = i64::from(nix::sys::stat::minor(rdev) as u32);
    Ok((typ.unwrap_or_else(|| found.into()), major, minor))
}

fn add_device(spec: &mut Spec, n: &schema::DeviceNode) -> std::result::Result<(), String> {
    let (typ, major, minor) = node_numbers(n)?;
    let user = spec.process().as_ref().map(|p| p.user().clone());
    // Owned by the container's user unless the spec says otherwise.
    let uid = n.uid.or(user.as_ref().map(|u| u.uid()).filter(|u| *u > 0));
    let gid = n.gid.or(user.as_ref().map(|u| u.gid()).filter(|g| *g > 0));
    let dtype = device_type(&typ);
    let mut b = LinuxDeviceBuilder::default()
        .path(PathBuf::from(&n.path))
        .typ(dtype)
        .major(major)
        .minor(minor);
    if let Some(m) = n.file_mode {
        b = b.file_mode(m);
    }
    if let Some(u) = uid {
        b = b.uid(u);
    }
    if let Some(g) = gid {
        b = b.gid(g);
    }
    let dev: LinuxDevice = b.build().map_err(|e| e.to_string())?;
    let mut linux = match spec.linux() {
        Some(l) => l.clone(),
        None => LinuxBuilder::default().build().map_err(|e| e.to_string())?,
    };
    if matches!(dtype, LinuxDeviceType::B | LinuxDeviceType::C) {
        let access = match n.permissions.as_deref() {
            None | Some("") => "rwm",
            Some("none") => "",
            Some(p) => p,
        };
        let rule = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(dtype)
            .major(major)
            .minor(minor)
            .access(access)
            .build()
            .map_err(|e| e.to_string())?;
        let mut res: LinuxResources = linux.resources().clone().unwrap_or_default();
        let mut rules = res.devices().clone().unwrap_or_default();
        rules.push(rule);
        res.set_devices(Some(rules));
        linux.set_resources(Some(res));
    }
    let mut devices = linux.devices().clone().unwrap_or_default();
    devices.retain(|d| d.path() != dev.path());
    devices.push(dev);
    linux.set_devices(Some(devices));
    spec.set_linux(Some(linux));
    Ok(())
}

fn add_mount(spec: &mut Spec, m: &schema::Mount) -> std::result::Result<(), String> {
    let mut b = MountBuilder::default()
        .destination(PathBuf::from(&m.container_path))
        .source(PathBuf::from(&m.host_path));
    if let Some(t) = &m.typ {
        b = b.typ(t.clone());
    }
    if !m.options.is_empty() {
        b = b.options(m.options.clone());
    }
    let mount: Mount = b.build().map_err(|e| e.to_string())?;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.retain(|x| x.destination() != mount.destination());
    mounts.push(mount);
    spec.set_mounts(Some(mounts));
    Ok(())
}

fn add_hook(spec: &mut Spec, h: &schema::Hook) -> std::result::Result<(), String> {
    let mut b = HookBuilder::default().path(PathBuf::from(&h.path));
    if !h.args.is_empty() {
        b = b.args(h.args.clone());
    }
    if !h.env.is_empty() {
        b = b.env(h.env.clone());
    }
    if let Some(t) = h.timeout {
        b = b.timeout(t);
    }
    let hook: Hook = b.build().map_err(|e| e.to_string())?;
    let mut hooks: Hooks = spec.hooks().clone().unwrap_or_default();
    let push = |list: &Option<Vec<Hook>>| {
        let mut l = list.clone().unwrap_or_default();
        l.push(hook.clone());
        Some(l)
    };
    match h.hook_name.as_str() {
        "prestart" => {
            #[allow(deprecated)]
            let l = push(hooks.prestart());
            #[allow(deprecated)]
            hooks.set_prestart(l);
        }
        "createRuntime" => {
            hooks.set_create_runtime(push(hooks.create_runtime()));
        }
        "createContainer" => {
            hooks.set_create_container(push(hooks.create_container()));
        }
        "startContainer" => {
            hooks.set_start_container(push(hooks.start_container()));
        }
        "poststart" => {
            hooks.set_poststart(push(hooks.poststart()));
        }
        "poststop" => {
            hooks.set_poststop(push(hooks.poststop()));
        }
        other => return Err(format!("no hook list {other:?}")),
    }
    spec.set_hooks(Some(hooks));
    Ok(())
}

/// Env (replacing a variable of the same name) and additional GIDs.
fn edit_process(spec: &mut Spec, e: &ContainerEdits) {
    if e.env.is_empty() && e.additional_gids.iter().all(|g| *g == 0) {
        return;
    }
    let mut process = spec.process().clone().unwrap_or_default();
    let mut env = process.env().clone().unwrap_or_default();
    for kv in &e.env {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        match env
            .iter_mut()
            .find(|x| x.split_once('=').is_some_and(|(k, _)| k == key))
        {
            Some(x) => x.clone_from(kv),
            None => env.push(kv.clone()),
        }
    }
    if !e.env.is_empty() {
        process.set_env(Some(env));
    }
    let mut user = process.user().clone();
    let mut gids = user.additional_gids().clone().unwrap_or_default();
    for g in e.additional_gids.iter().filter(|g| **g > 0) {
        if !gids.contains(g) {
            gids.push(*g);
        }
    }
    if !gids.is_empty() {
        user.set_additional_gids(Some(gids));
        process.set_user(user);
    }
    spec.set_process(Some(process));
}

/// Applies the edits of `resolved` to `spec` and returns the device nodes they add.
/// On error `spec` is left untouched.
pub fn apply_cdi(spec: &mut Spec, resolved: &[ResolvedCdi]) -> Result<Vec<CdiNodeInfo>> {
    if resolved.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = resolved.iter().map(|r| r.name.as_str()).collect();
    let err = |reason: String| DeviceError::CdiApply {
        names: names.join(", "),
        reason,
    };
    let edits = merged_edits(resolved);
    let mut next = spec.clone();
    edit_process(&mut next, &edits);
    for n in &edits.device_nodes {
        add_device(&mut next, n).map_err(err)?;
    }
    for m in &edits.mounts {
        add_mount(&mut next, m).map_err(err)?;
    }
    for h in &edits.hooks {
        add_hook(&mut next, h).map_err(err)?;
    }
    *spec = next;
    Ok(edits
        .device_nodes
        .into_iter()
        .map(|n| CdiNodeInfo {
            host_path: PathBuf::from(n.host_path.as_deref().unwrap_or(&n.path)),
            path: n.path,
        })
        .collect())
}
