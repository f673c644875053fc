//! Validation of a parsed CDI spec: version (and the minimum one its fields need), kind,
//! device names, and every container edit. Errors name the field, e.g.
//! `devices[1].containerEdits.deviceNodes[0].type`.

use std::collections::HashSet;

use super::schema::{ContainerEdits, Spec, HOOK_NAMES};
use crate::select::{check_device_name, parse_kind};

/// The versions of the CDI spec this parser knows, oldest first.
pub const VERSIONS: [&str; 8] = [
    "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

fn version_rank(v: &str) -> Option<usize> {
    VERSIONS.iter().position(|k| *k == v)
}

fn all_edits(spec: &Spec) -> impl Iterator<Item = &ContainerEdits> {
    spec.container_edits
        .iter()
        .chain(spec.devices.iter().map(|d| &d.container_edits))
}

/// The oldest version that has every field the spec uses, and the field that needs it.
fn required_version(spec: &Spec) -> (&'static str, &'static str) {
    let any = |f: &dyn Fn(&ContainerEdits) -> bool| all_edits(spec).any(f);
    if any(&|e| !e.net_devices.is_empty()) {
        return ("1.1.0", "netDevices");
    }
    if any(&|e| e.intel_rdt.is_some()) {
        return ("0.7.0", "intelRdt");
    }
    if any(&|e| !e.additional_gids.is_empty()) {
        return ("0.7.0", "additionalGids");
    }
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) {
        return ("0.6.0", "annotations");
    }
    if any(&|e| e.device_nodes.iter().any(|n| n.host_path.is_some())) {
        return ("0.5.0", "deviceNodes[].hostPath");
    }
    if spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()))
    {
        return ("0.5.0", "a device name not starting with a letter");
    }
    if any(&|e| e.mounts.iter().any(|m| m.typ.is_some())) {
        return ("0.4.0", "mounts[].type");
    }
    ("0.3.0", "")
}

fn check_env(field: &str, env: &[String]) -> Result<(), String> {
    for (i, e) in env.iter().enumerate() {
        if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            return Err(format!("{field}[{i}]: {e:?} is not NAME=value"));
        }
    }
    Ok(())
}

fn check_edits(at: &str, e: &ContainerEdits) -> Result<(), String> {
    check_env(&format!("{at}.env"), &e.env)?;
    for (i, n) in e.device_nodes.iter().enumerate() {
        let f = format!("{at}.deviceNodes[{i}]");
        if n.path.is_empty() {
            return Err(format!("{f}.path: empty"));
        }
        if let Some(t) = &n.typ {
            if !["b", "c", "u", "p", ""].contains(&t.as_str()) {
                return Err(format!("{f}.type: {t:?} is not b, c, u or p"));
            }
        }
        if let Some(p) = &n.permissions {
            if p != "none" && !p.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
                return Err(format!("{f}.permissions: {p:?} is not a subset of rwm"));
            }
        }
    }
    for (i, h) in e.hooks.iter().enumerate() {
        let f = format!("{at}.hooks[{i}]");
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            return Err(format!(
                "{f}.hookName: {:?} is not one of {}",
                h.hook_name,
                HOOK_NAMES.join(", ")
            ));
        }
        if h.path.is_empty() {
            return Err(format!("{f}.path: empty"));
        }
        check_env(&format!("{f}.env"), &h.env)?;
    }
    for (i, m) in e.mounts.iter().enumerate() {
        let f = format!("{at}.mounts[{i}]");
        if m.host_path.is_empty() {
            return Err(format!("{f}.hostPath: empty"));
        }
        if m.container_path.is_empty() {
            return Err(format!("{f}.containerPath: empty"));
        }
    }
    if e.intel_rdt.is_some() {
        return Err(format!("{at}.intelRdt: not supported by rund"));
    }
    if !e.net_devices.is_empty() {
        return Err(format!("{at}.netDevices: not supported by rund"));
    }
    Ok(())
}

/// Checks a whole spec; the error names the offending field.
pub fn validate(spec: &Spec) -> Result<(), String> {
    let Some(declared) = version_rank(&spec.version) else {
        return Err(format!(
            "cdiVersion: {:?} is not one of {}",
            spec.version,
            VERSIONS.join(", ")
        ));
    };
    let (needed, why) = required_version(spec);
    if version_rank(needed).is_some_and(|n| n > declared) {
        return Err(format!(
            "cdiVersion: {} is too old for {why} (needs {needed})",
            spec.version
        ));
    }
    parse_kind(&spec.kind).map_err(|e| format!("kind: {:?}: {e}", spec.kind))?;
    if spec.devices.is_empty() {
        return Err("devices: no devices".into());
    }
    if let Some(e) = &spec.container_edits {
        check_edits("containerEdits", e)?;
    }
    let mut seen = HashSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let f = format!("devices[{i}]");
        check_device_name(&d.name).map_err(|e| format!("{f}.name: {e}"))?;
        if !seen.insert(d.name.as_str()) {
            return Err(format!("{f}.name: {:?} is defined twice", d.name));
        }
        if d.container_edits.is_empty() {
            return Err(format!("{f}.containerEdits: empty"));
        }
        check_edits(&format!("{f}.containerEdits"), &d.container_edits)?;
    }
    Ok(())
}
