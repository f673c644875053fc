//! Reading and checking the bundle's OCI spec, and the facts the shim derives
//! from it (pod grouping, namespace plan). Pure functions: unit-tested
//! without root.

pub mod cgroupfs;
pub mod namespaced;
pub mod namespaces;

use std::path::Path;

use oci_spec::runtime::Spec;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config.json is malformed: {0}")]
    Malformed(String),
    #[error("spec field {0} is not supported by rund: {1}")]
    Unsupported(&'static str, String),
    #[error("invalid spec: {0}")]
    Invalid(String),
    #[error("annotation {key}: {reason}")]
    Annotation { key: String, reason: String },
}

/// Reads `<bundle>/config.json`.
pub fn load(bundle: &Path) -> Result<Spec, SpecError> {
    let path = bundle.join("config.json");
    let text = std::fs::read(&path).map_err(|source| SpecError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text)
}

pub fn parse(text: &[u8]) -> Result<Spec, SpecError> {
    serde_json::from_slice(text).map_err(|e| SpecError::Malformed(e.to_string()))
}

/// How a container relates to its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// `ctr run` and friends: the container is its own sandbox.
    Standalone,
    /// CRI's pod sandbox container: the agent plays it, no process runs.
    PodSandbox,
    /// A CRI application container of pod `sandbox_id`.
    PodContainer { sandbox_id: String },
}

pub fn role(spec: &Spec) -> Role {
    let ann = spec.annotations().as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).cloned();
    match (
        get(rund_annotations::CRI_CONTAINER_TYPE).as_deref(),
        get(rund_annotations::CRI_SANDBOX_ID),
    ) {
        (Some("sandbox"), _) => Role::PodSandbox,
        (Some(_), Some(sandbox_id)) => Role::PodContainer { sandbox_id },
        _ => Role::Standalone,
    }
}

/// The id that groups containers onto one shim: the pod's sandbox id.
pub fn grouping_id(spec: &Spec, container_id: &str) -> String {
    spec.annotations()
        .as_ref()
        .and_then(|a| a.get(rund_annotations::CRI_SANDBOX_ID))
        .cloned()
        .unwrap_or_else(|| container_id.to_string())
}

/// Rejects spec fields rund does not apply, naming each; nothing is ignored
/// silently.
pub fn check_supported(spec: &Spec) -> Result<(), SpecError> {
    let process = spec
        .process()
        .as_ref()
        .ok_or_else(|| SpecError::Invalid("process is missing".into()))?;
    if process.args().as_ref().is_none_or(|a| a.is_empty()) {
        return Err(SpecError::Invalid("process.args is empty".into()));
    }
    if let Some(p) = process.apparmor_profile() {
        if !p.is_empty() {
            return Err(SpecError::Unsupported("process.apparmorProfile", p.clone()));
        }
    }
    if let Some(l) = process.selinux_label() {
        if !l.is_empty() {
            return Err(SpecError::Unsupported("process.selinuxLabel", l.clone()));
        }
    }
    if process.io_priority().is_some() {
        return Err(SpecError::Unsupported("process.ioPriority", "set".into()));
    }
    if process.scheduler().is_some() {
        return Err(SpecError::Unsupported("process.scheduler", "set".into()));
    }
    if process.exec_cpu_affinity().is_some() {
        return Err(SpecError::Unsupported(
            "process.execCPUAffinity",
            "set".into(),
        ));
    }
    if spec.root().is_none() {
        return Err(SpecError::Invalid("root is missing".into()));
    }
    if let Some(linux) = spec.linux() {
        // runc refuses a type listed twice; taking either one is a guess.
        let list = linux.namespaces().as_deref().unwrap_or_default();
        for (i, ns) in list.iter().enumerate() {
            if list[..i].iter().any(|o| o.typ() == ns.typ()) {
                return Err(SpecError::Invalid(format!(
                    "linux.namespaces lists {} twice",
                    ns.typ()
                )));
            }
        }
        if let Some(l) = linux.mount_label() {
            if !l.is_empty() {
                return Err(SpecError::Unsupported("linux.mountLabel", l.clone()));
            }
        }
        if linux.intel_rdt().is_some() {
            return Err(SpecError::Unsupported("linux.intelRdt", "set".into()));
        }
        if linux.personality().is_some() {
            return Err(SpecError::Unsupported("linux.personality", "set".into()));
        }
        if linux.time_offsets().is_some() {
            return Err(SpecError::Unsupported("linux.timeOffsets", "set".into()));
        }
        if let Some(s) = linux.seccomp() {
            if s.listener_path().is_some() {
                return Err(SpecError::Unsupported(
                    "linux.seccomp.listenerPath",
                    "seccomp user notification".into(),
                ));
            }
        }
        if let Some(p) = linux.rootfs_propagation() {
            if !p.is_empty() && !namespaced::PROPAGATIONS.contains(&p.as_str()) {
                return Err(SpecError::Invalid(format!(
                    "linux.rootfsPropagation {p:?} is not one of {}",
                    namespaced::PROPAGATIONS.join(", ")
                )));
            }
        }
    }
    if spec.solaris().is_some() {
        return Err(SpecError::Unsupported("solaris", "set".into()));
    }
    if spec.windows().is_some() {
        return Err(SpecError::Unsupported("windows", "set".into()));
    }
    if spec.vm().is_some() {
        return Err(SpecError::Unsupported("vm", "set".into()));
    }
    Ok(())
}

/// Whether to run the tini-like init: `rund.io/init` decides when set; else
/// it runs unless `enabled` is off or the workload is itself an init named
/// in `skip_for` (by the basename of `process.args[0]`).
pub fn use_init(spec: &Spec, enabled: bool, skip_for: &[String]) -> Result<bool, SpecError> {
    match annotation(spec, rund_annotations::INIT) {
        None => {
            let arg0 = spec
                .process()
                .as_ref()
                .and_then(|p| p.args().as_ref())
                .and_then(|a| a.first())
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                .unwrap_or_default();
            Ok(enabled && !skip_for.contains(&arg0))
        }
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(SpecError::Annotation {
            key: rund_annotations::INIT.into(),
            reason: format!("{v:?} is not \"true\" or \"false\""),
        }),
    }
}

/// `rund.io/grace-period-seconds`, if set.
pub fn grace_seconds(spec: &Spec) -> Result<Option<u32>, SpecError> {
    match annotation(spec, rund_annotations::GRACE_PERIOD) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| SpecError::Annotation {
            key: rund_annotations::GRACE_PERIOD.into(),
            reason: format!("{v:?} is not a whole number of seconds"),
        }),
    }
}

pub fn annotation<'a>(spec: &'a Spec, key: &str) -> Option<&'a str> {
    spec.annotations().as_ref()?.get(key).map(|s| s.as_str())
}

#[cfg(test)]
mod tests;
