//! `rund cdi generate`: CDI specs for what discovery found, for other runtimes too.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::config::DeviceConfig;
use crate::devnode::{DeviceNode, ProcDevices};
use crate::error::{DeviceError, Result};
use crate::gpu::{self, DriverCapabilities, Gpu};
use crate::inject::BIND_RO_OPTIONS;
use crate::rdma::{self, RdmaDevice};

pub const GPU_KIND: &str = "nvidia.com/gpu";
pub const RDMA_KIND: &str = "rund.io/rdma";
/// hostPath on device nodes needs CDI 0.5.0; nothing newer is used.
const CDI_VERSION: &str = "0.5.0";

fn node_json(n: &DeviceNode) -> Value {
    json!({
        "path": n.path,
        "hostPath": n.host_path,
        "type": "c",
        "major": n.major,
        "minor": n.minor,
    })
}

fn nodes_json<'a>(nodes: impl IntoIterator<Item = &'a DeviceNode>) -> Value {
    Value::Array(nodes.into_iter().map(node_json).collect())
}

fn device(name: &str, nodes: Value) -> Value {
    json!({ "name": name, "containerEdits": { "deviceNodes": nodes } })
}

/// The `nvidia.com/gpu` spec: devices by index, by UUID and `all`; control nodes and
/// driver files (default capabilities) as spec-wide edits.
pub fn gpu_cdi_spec(cfg: &DeviceConfig, gpus: &[Gpu]) -> Result<Value> {
    let pd = ProcDevices::read(&cfg.proc_devices)?;
    let (ctl, _warnings) = gpu::gpu_control_nodes(cfg, &pd);
    let mounts: Vec<Value> = gpu::driver_files(cfg, &DriverCapabilities::default())
        .iter()
        .map(|f| {
            json!({
                "hostPath": f.path,
                "containerPath": f.path,
                "type": "bind",
                "options": BIND_RO_OPTIONS,
            })
        })
        .collect();
    let mut devices = Vec::new();
    for g in gpus {
        devices.push(device(&g.index.to_string(), nodes_json([&g.node])));
        devices.push(device(&g.uuid, nodes_json([&g.node])));
    }
    devices.push(device("all", nodes_json(gpus.iter().map(|g| &g.node))));
    let mut edits = json!({ "deviceNodes": nodes_json(&ctl) });
    if !mounts.is_empty() {
        edits["mounts"] = Value::Array(mounts);
    }
    Ok(json!({
        "cdiVersion": CDI_VERSION,
        "kind": GPU_KIND,
        "devices": devices,
        "containerEdits": edits,
    }))
}

/// The `rund.io/rdma` spec: one device per RDMA device plus `all`; rdma_cm spec-wide.
pub fn rdma_cdi_spec(cfg: &DeviceConfig, devs: &[RdmaDevice]) -> Value {
    let mut devices: Vec<Value> = devs
        .iter()
        .map(|d| device(&d.name, nodes_json(d.nodes())))
        .collect();
    devices.push(device(
        "all",
        nodes_json(devs.iter().flat_map(|d| d.nodes())),
    ));
    let mut spec = json!({ "cdiVersion": CDI_VERSION, "kind": RDMA_KIND, "devices": devices });
    if let Some(cm) = rdma::rdma_cm_node(cfg) {
        spec["containerEdits"] = json!({ "deviceNodes": [node_json(&cm)] });
    }
    spec
}

fn file_name(kind: &str) -> String {
    format!("rund-{}.json", kind.replace('/', "-"))
}

/// Validates as a reader would, then writes atomically (temp file + rename).
fn write_spec(out_dir: &Path, kind: &str, spec: &Value) -> Result<PathBuf> {
    let path = out_dir.join(file_name(kind));
    let raw: super::schema::Spec =
        serde_json::from_value(spec.clone()).map_err(|e| DeviceError::CdiSpec {
            path: path.clone(),
            reason: format!("generated spec does not parse: {e}"),
        })?;
    super::validate(&raw).map_err(|e| DeviceError::CdiSpec {
        path: path.clone(),
        reason: format!("generated spec is invalid: {e}"),
    })?;
    let tmp = out_dir.join(format!(".{}.tmp", file_name(kind)));
    let body = serde_json::to_vec_pretty(spec).map_err(|e| DeviceError::Spec(e.to_string()))?;
    std::fs::write(&tmp, body).map_err(|e| DeviceError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        DeviceError::io("rename", &path, e)
    })?;
    Ok(path)
}

/// What `cdi_generate` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerateReport {
    pub written: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    pub notes: Vec<String>,
}

fn remove_stale(out_dir: &Path, kind: &str, report: &mut GenerateReport) {
    let path = out_dir.join(file_name(kind));
    if std::fs::remove_file(&path).is_ok() {
        report.removed.push(path);
    }
}

/// Writes `rund-nvidia.com-gpu.json` and `rund-rund.io-rdma.json` for the discovered
/// devices into `out_dir`. A kind with nothing discovered gets no file (a stale one of
/// ours is removed); NVML being unavailable is a note, not an error.
pub fn cdi_generate(cfg: &DeviceConfig, out_dir: &Path) -> Result<GenerateReport> {
    let mut report = GenerateReport::default();
    let gpus = match gpu::discover_gpus(cfg) {
        Ok(g) => g,
        Err(e) => {
            report.notes.push(format!("no NVML: {e}"));
            Vec::new()
        }
    };
    let rdma_devs = rdma::discover_rdma(cfg);
    let gpu_spec = (!gpus.is_empty())
        .then(|| gpu_cdi_spec(cfg, &gpus))
        .transpose()?;
    let rdma_spec = (!rdma_devs.is_empty()).then(|| rdma_cdi_spec(cfg, &rdma_devs));
    if gpu_spec.is_some() || rdma_spec.is_some() {
        std::fs::create_dir_all(out_dir).map_err(|e| DeviceError::io("create", out_dir, e))?;
    }
    for (kind, spec) in [(GPU_KIND, gpu_spec), (RDMA_KIND, rdma_spec)] {
        match spec {
            Some(s) => report.written.push(write_spec(out_dir, kind, &s)?),
            None => {
                report.notes.push(format!("no {kind} devices discovered"));
                remove_stale(out_dir, kind, &mut report);
            }
        }
    }
    Ok(report)
}
