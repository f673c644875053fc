//! Applying CDI container edits. The crate edits an oci-spec 0.10 `Spec`; rund uses 0.9,
//! so the spec crosses over through serde_json (both versions share the OCI JSON schema).

use std::collections::HashSet;
use std::path::PathBuf;

use container_device_interface::container_edits::ContainerEdits;
use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};

use super::ResolvedCdi;
use crate::error::{DeviceError, Result};

/// A device node a CDI device asks for: where it is in the container and on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdiNodeInfo {
    pub path: String,
    pub host_path: PathBuf,
}

fn convert<A: Serialize, B: for<'de> Deserialize<'de>>(a: &A, what: &str) -> Result<B> {
    let v = serde_json::to_value(a).map_err(|e| DeviceError::Spec(format!("{what}: {e}")))?;
    serde_json::from_value(v).map_err(|e| DeviceError::Spec(format!("{what}: {e}")))
}

/// The edits of all devices, each spec file's global edits counted once.
fn merged_edits(resolved: &[ResolvedCdi], names: &str) -> Result<ContainerEdits> {
    let mut edits = ContainerEdits::new();
    let mut seen = HashSet::new();
    let err = |e: anyhow::Error| DeviceError::CdiApply {
        names: names.into(),
        reason: format!("{e:#}"),
    };
    for r in resolved {
        if seen.insert(r.spec_path.clone()) {
            if let Some(se) = &r.spec_edits {
                edits.append(se.clone()).map_err(err)?;
            }
        }
        edits.append(r.device_edits.clone()).map_err(err)?;
    }
    Ok(edits)
}

#[derive(Deserialize)]
struct NodeView {
    path: String,
    #[serde(rename = "hostPath")]
    host_path: Option<String>,
}

/// Applies the edits of `resolved` to `spec` and returns the device nodes they add.
/// On error `spec` is left untouched.
pub fn apply_cdi(spec: &mut Spec, resolved: &[ResolvedCdi]) -> Result<Vec<CdiNodeInfo>> {
    if resolved.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = resolved.iter().map(|r| r.name.as_str()).collect();
    let names = names.join(", ");
    let mut edits = merged_edits(resolved, &names)?;

    let nodes: Vec<NodeView> = match &edits.container_edits.device_nodes {
        Some(n) => convert(n, "CDI device nodes")?,
        None => Vec::new(),
    };
    let mut next: oci_spec_cdi::runtime::Spec = convert(spec, "OCI spec to oci-spec 0.10")?;
    edits.apply(&mut next).map_err(|e| DeviceError::CdiApply {
        names: names.clone(),
        reason: format!("{e:#}"),
    })?;
    *spec = convert(&next, "OCI spec back to oci-spec 0.9")?;
    Ok(nodes
        .into_iter()
        .map(|n| CdiNodeInfo {
            host_path: PathBuf::from(n.host_path.as_deref().unwrap_or(&n.path)),
            path: n.path,
        })
        .collect())
}
