//! Device requests under the policy. A container's devices come from:
//! - `cdi.k8s.io/*` **container** annotations: the device plugin's
//!   allocation (the kubelet sets them; pod authors cannot), always honoured;
//! - `cdi.k8s.io/*` **pod** annotations, `rund.io/gpus`,
//!   `rund.io/rdma-devices`: the pod author's own requests, refused unless
//!   `[policy] allowed_*` names what they ask for;
//! - `NVIDIA_VISIBLE_DEVICES` in the env: usually baked into CUDA images,
//!   so ignored (and logged) unless `accept_nvidia_visible_devices_env`, as
//!   nvidia-container-toolkit does for unprivileged containers.
//!
//! A CDI annotation counts as the pod's when the pod's sandbox spec (which
//! carries only pod annotations) has the same key and value.

use std::collections::HashMap;

use oci_spec::runtime::Spec;
use rund_devices::select::{
    CdiName, DeviceRequest, GpuSelection, RdmaSelection, VISIBLE_DEVICES_ENV,
};
use rund_devices::Resolved;

use super::{PolicyConfig, PolicyError};

/// A request the policy let through, with what it dropped.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub request: DeviceRequest,
    /// Where the GPU request came from, for refusals after resolution.
    gpu_request: Option<String>,
    rdma_request: Option<String>,
    /// Requests ignored by policy, for the log.
    pub notes: Vec<String>,
}

fn env_value(spec: &Spec, key: &str) -> Option<String> {
    let env = spec.process().as_ref()?.env().as_ref()?;
    env.iter()
        .rev()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// Applies the policy to `req`, parsed from `spec`, before anything is
/// resolved. `pod_annotations`: the annotations of the pod's sandbox spec
/// (`None` for a standalone container, which is its own sandbox).
pub fn admit(
    policy: &PolicyConfig,
    spec: &Spec,
    pod_annotations: Option<&HashMap<String, String>>,
    mut req: DeviceRequest,
) -> Result<Admitted, PolicyError> {
    let ann = spec.annotations().clone().unwrap_or_default();
    let mut notes = Vec::new();

    let mut gpu_request = None;
    if req.gpus != GpuSelection::Nothing {
        let (request, from_env) = match ann.get(rund_annotations::GPUS) {
            Some(v) => (
                format!("annotation {}={v:?}", rund_annotations::GPUS),
                false,
            ),
            None => {
                let v = env_value(spec, VISIBLE_DEVICES_ENV).unwrap_or_default();
                (format!("env {VISIBLE_DEVICES_ENV}={v:?}"), true)
            }
        };
        if from_env && !policy.accept_nvidia_visible_devices_env {
            notes.push(format!(
                "{request} ignored: [policy] accept_nvidia_visible_devices_env is false \
                 (GPUs come from CDI devices the device plugin allocates)"
            ));
            req.gpus = GpuSelection::Nothing;
        } else {
            let key = "[policy] allowed_gpus";
            let has = |e: &str| policy.allowed_gpus.iter().any(|a| a == e);
            let refuse = match &req.gpus {
                _ if policy.allowed_gpus.is_empty() => Some("the list is empty".to_string()),
                GpuSelection::All if !has("all") => Some("\"all\" is not listed".into()),
                GpuSelection::DriverOnly if !has("all") && !has("none") => {
                    Some("neither \"none\" nor \"all\" is listed".into())
                }
                _ => None,
            };
            if let Some(reason) = refuse {
                return Err(PolicyError::new(request, key, reason));
            }
            gpu_request = Some(request);
        }
    }

    let mut rdma_request = None;
    if req.rdma != RdmaSelection::Nothing {
        let request = format!(
            "annotation {}={:?}",
            rund_annotations::RDMA_DEVICES,
            ann.get(rund_annotations::RDMA_DEVICES)
                .cloned()
                .unwrap_or_default()
        );
        let key = "[policy] allowed_rdma_devices";
        let all = policy.allowed_rdma_devices.iter().any(|a| a == "all");
        if policy.allowed_rdma_devices.is_empty() {
            return Err(PolicyError::new(request, key, "the list is empty"));
        }
        if req.rdma == RdmaSelection::All && !all {
            return Err(PolicyError::new(request, key, "\"all\" is not listed"));
        }
        rdma_request = Some(request);
    }

    if let Some(pod) = pod_annotations {
        let mut keys: Vec<&String> = ann
            .keys()
            .filter(|k| k.starts_with(rund_annotations::CDI_PREFIX) && pod.get(*k) == ann.get(*k))
            .collect();
        keys.sort();
        for key in keys {
            for raw in ann[key].split(',') {
                // from_spec parsed every name already; a bad one cannot get here.
                let Ok(name) = CdiName::parse(raw.trim()) else {
                    continue;
                };
                if !policy.allows_cdi(&name) {
                    return Err(PolicyError::new(
                        format!("pod annotation {key}={:?}", ann[key]),
                        "[policy] allowed_cdi_devices",
                        format!(
                            "{name} is not listed; CDI devices are honoured from container \
                             annotations (the device plugin's), and from pod annotations only \
                             when listed"
                        ),
                    ));
                }
            }
        }
    }
    Ok(Admitted {
        request: req,
        gpu_request,
        rdma_request,
        notes,
    })
}

/// After resolution: every GPU and RDMA device the request named must be
/// in the allow-list (an index and a UUID name the same GPU).
pub fn check_resolved(
    policy: &PolicyConfig,
    admitted: &Admitted,
    resolved: &Resolved,
) -> Result<(), PolicyError> {
    if let Some(request) = &admitted.gpu_request {
        if let Some(g) = resolved
            .gpus
            .iter()
            .find(|g| !policy.allows_gpu(g.index, &g.uuid))
        {
            return Err(PolicyError::new(
                request.clone(),
                "[policy] allowed_gpus",
                format!("GPU {} ({}) is not listed", g.index, g.uuid),
            ));
        }
    }
    if let Some(request) = &admitted.rdma_request {
        if let Some(d) = resolved.rdma.iter().find(|d| !policy.allows_rdma(&d.name)) {
            return Err(PolicyError::new(
                request.clone(),
                "[policy] allowed_rdma_devices",
                format!("RDMA device {} is not listed", d.name),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
