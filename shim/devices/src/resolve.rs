//! Turns a `DeviceRequest` into concrete nodes, mounts and env, touching NVML only when
//! GPUs are actually requested.

use std::path::PathBuf;

use serde::Serialize;

use crate::cdi::{CdiRegistry, ResolvedCdi};
use crate::config::DeviceConfig;
use crate::devnode::{DeviceNode, ProcDevices};
use crate::error::{DeviceError, Result};
use crate::gpu::{self, Gpu, GpuSource, InProcessNvml};
use crate::rdma::{self, RdmaDevice};
use crate::select::{DeviceRequest, GpuId, GpuSelection, RdmaId, RdmaSelection};

/// Env naming the injected RDMA devices, for the workload and the write_bw check.
pub const RDMA_DEVICES_ENV: &str = "RUND_RDMA_DEVICES";

/// A read-only bind mount of a host file at the same path in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindMount {
    pub source: PathBuf,
    pub destination: PathBuf,
}

/// Everything to inject for one container.
#[derive(Debug, Default)]
pub struct Resolved {
    pub gpus: Vec<Gpu>,
    pub rdma: Vec<RdmaDevice>,
    pub nodes: Vec<DeviceNode>,
    pub mounts: Vec<BindMount>,
    pub env: Vec<(String, String)>,
    pub cdi: Vec<ResolvedCdi>,
    pub warnings: Vec<String>,
}

impl Resolved {
    fn push_node(&mut self, n: DeviceNode) {
        if !self.nodes.iter().any(|m| m.path == n.path) {
            self.nodes.push(n);
        }
    }

    /// True when nothing is to be injected.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
            && self.mounts.is_empty()
            && self.env.is_empty()
            && self.cdi.is_empty()
    }
}

fn pick_gpus(all: Vec<Gpu>, sel: &GpuSelection) -> Result<Vec<Gpu>> {
    let ids = match sel {
        GpuSelection::All if all.is_empty() => return Err(DeviceError::NoGpus),
        GpuSelection::All => return Ok(all),
        GpuSelection::List(ids) => ids,
        GpuSelection::Nothing | GpuSelection::DriverOnly => return Ok(Vec::new()),
    };
    let mut out: Vec<Gpu> = Vec::new();
    for id in ids {
        let found = all.iter().find(|g| match id {
            GpuId::Index(i) => g.index == *i,
            GpuId::Uuid(u) => g.uuid.eq_ignore_ascii_case(u),
        });
        let g = found.ok_or_else(|| DeviceError::UnknownGpu {
            id: id.to_string(),
            available: if all.is_empty() {
                "none".into()
            } else {
                all.iter()
                    .map(|g| format!("{} ({})", g.index, g.uuid))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })?;
        if !out.iter().any(|o| o.index == g.index) {
            out.push(g.clone());
        }
    }
    Ok(out)
}

fn resolve_gpus(
    cfg: &DeviceConfig,
    req: &DeviceRequest,
    gpus: &dyn GpuSource,
    out: &mut Resolved,
) -> Result<()> {
    let visible = match &req.gpus {
        GpuSelection::Nothing => return Ok(()),
        GpuSelection::DriverOnly => "none".to_string(),
        sel => {
            out.gpus = pick_gpus(gpus.discover(cfg)?, sel)?;
            let uuids: Vec<&str> = out.gpus.iter().map(|g| g.uuid.as_str()).collect();
            uuids.join(",")
        }
    };
    for g in out.gpus.clone() {
        out.push_node(g.node);
    }
    let (ctl, warnings) = gpu::gpu_control_nodes(cfg, &ProcDevices::read(&cfg.proc_devices)?);
    ctl.into_iter().for_each(|n| out.push_node(n));
    out.warnings.extend(warnings);
    for f in gpu::driver_files(cfg, &req.capabilities) {
        out.mounts.push(BindMount {
            source: f.path.clone(),
            destination: f.path,
        });
    }
    out.env.push(("NVIDIA_VISIBLE_DEVICES".into(), visible));
    out.env.push((
        "NVIDIA_DRIVER_CAPABILITIES".into(),
        req.capabilities.to_string(),
    ));
    Ok(())
}

fn resolve_rdma(cfg: &DeviceConfig, req: &DeviceRequest, out: &mut Resolved) -> Result<()> {
    if req.rdma == RdmaSelection::Nothing {
        return Ok(());
    }
    let all = rdma::discover_rdma(cfg);
    let available = || {
        let v: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    };
    let mut chosen: Vec<String> = Vec::new();
    match &req.rdma {
        RdmaSelection::All if all.is_empty() => {
            return Err(DeviceError::NoRdmaDevices {
                path: cfg.sysfs_root.join("class/infiniband"),
            })
        }
        RdmaSelection::All => chosen = all.iter().map(|d| d.name.clone()).collect(),
        RdmaSelection::List(ids) => {
            for id in ids {
                let names = match id {
                    RdmaId::Device(n) if all.iter().any(|d| &d.name == n) => vec![n.clone()],
                    RdmaId::Device(n) => {
                        return Err(DeviceError::UnknownRdmaDevice {
                            name: n.clone(),
                            available: available(),
                        })
                    }
                    RdmaId::Netdev(nd) => {
                        let names = rdma::rdma_for_netdev(cfg, &all, nd);
                        if names.is_empty() {
                            let mut nds: Vec<&str> = all
                                .iter()
                                .flat_map(|d| d.netdevs.iter().map(String::as_str))
                                .collect();
                            nds.sort();
                            nds.dedup();
                            return Err(DeviceError::UnknownNetdev {
                                netdev: nd.clone(),
                                available: if nds.is_empty() {
                                    "none".into()
                                } else {
                                    nds.join(", ")
                                },
                            });
                        }
                        names
                    }
                };
                for n in names {
                    if !chosen.contains(&n) {
                        chosen.push(n);
                    }
                }
            }
        }
        RdmaSelection::Nothing => {}
    }
    for name in &chosen {
        let Some(dev) = all.iter().find(|d| &d.name == name) else {
            continue;
        };
        if dev.uverbs.is_none() {
            return Err(DeviceError::MissingDevNumber {
                what: format!("uverbs device of {name}"),
                reason: "no infiniband_verbs entry with a readable dev number".into(),
            });
        }
        dev.nodes().cloned().for_each(|n| out.push_node(n));
        out.rdma.push(dev.clone());
    }
    match rdma::rdma_cm_node(cfg) {
        Some(cm) => out.push_node(cm),
        None => out.warnings.push(
            "no /dev/infiniband/rdma_cm (rdma_ucm not loaded?): librdmacm will not work".into(),
        ),
    }
    out.env.push((RDMA_DEVICES_ENV.into(), chosen.join(",")));
    Ok(())
}

/// Resolves a request against the host, with NVML in this process. Asking
/// for nothing reads nothing.
pub fn resolve(cfg: &DeviceConfig, req: &DeviceRequest) -> Result<Resolved> {
    resolve_with(cfg, req, &InProcessNvml)
}

/// [`resolve`], with the GPUs found by `gpus` (the static shim: a helper process).
pub fn resolve_with(
    cfg: &DeviceConfig,
    req: &DeviceRequest,
    gpus: &dyn GpuSource,
) -> Result<Resolved> {
    let mut out = Resolved::default();
    if req.is_empty() {
        return Ok(out);
    }
    resolve_gpus(cfg, req, gpus, &mut out)?;
    resolve_rdma(cfg, req, &mut out)?;
    if !req.cdi_devices.is_empty() {
        out.cdi = CdiRegistry::load(&cfg.cdi_spec_dirs).resolve(&req.cdi_devices)?;
    }
    Ok(out)
}
