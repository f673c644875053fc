//! What a container asks for: env `NVIDIA_VISIBLE_DEVICES` / `NVIDIA_DRIVER_CAPABILITIES`,
//! annotations `rund.io/gpus`, `rund.io/rdma-devices` and `cdi.k8s.io/*`.

mod cdi_name;

use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};

use crate::error::{DeviceError, Result};
use crate::gpu::DriverCapabilities;

pub use cdi_name::CdiName;
pub(crate) use cdi_name::{check_device_name, parse_kind};

pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
pub const CAPABILITIES_ENV: &str = "NVIDIA_DRIVER_CAPABILITIES";

/// A GPU named by NVML index or UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuId {
    Index(u32),
    Uuid(String),
}

impl std::fmt::Display for GpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuId::Index(i) => write!(f, "{i}"),
            GpuId::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which GPUs are wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuSelection {
    /// Unset, empty or `void`: nothing NVIDIA at all.
    #[default]
    Nothing,
    /// `none`: the driver (control nodes, libraries) but no GPU.
    DriverOnly,
    All,
    List(Vec<GpuId>),
}

/// An RDMA device named directly or through a netdev.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RdmaId {
    Device(String),
    Netdev(String),
}

/// Which RDMA devices are wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RdmaSelection {
    #[default]
    Nothing,
    All,
    List(Vec<RdmaId>),
}

/// The parsed device request of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRequest {
    pub gpus: GpuSelection,
    pub capabilities: DriverCapabilities,
    pub rdma: RdmaSelection,
    /// CDI names from `cdi.k8s.io/*` annotations, in annotation-key order.
    pub cdi_devices: Vec<CdiName>,
}

fn invalid(source: &str, value: &str, reason: impl Into<String>) -> DeviceError {
    DeviceError::InvalidRequest {
        source_name: source.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// A device or interface name: no path separators, whitespace or control characters.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_graphic() && c != '/' && c != ',')
}

/// Parses an `NVIDIA_VISIBLE_DEVICES`-style value.
pub fn parse_gpu_selection(source: &str, value: &str) -> Result<GpuSelection> {
    let v = value.trim();
    match v {
        "" | "void" => return Ok(GpuSelection::Nothing),
        "none" => return Ok(GpuSelection::DriverOnly),
        "all" => return Ok(GpuSelection::All),
        _ => {}
    }
    let mut ids = Vec::new();
    for item in v.split(',').map(str::trim) {
        let id = if item.chars().all(|c| c.is_ascii_digit()) && !item.is_empty() {
            GpuId::Index(
                item.parse()
                    .map_err(|_| invalid(source, value, "index out of range"))?,
            )
        } else if item.starts_with("GPU-") && plain_name(item) {
            GpuId::Uuid(item.to_string())
        } else if matches!(item, "all" | "none" | "void") {
            return Err(invalid(
                source,
                value,
                format!("{item:?} cannot be combined with other ids"),
            ));
        } else {
            return Err(invalid(
                source,
                value,
                format!("{item:?} is neither a GPU index nor a GPU-<uuid>"),
            ));
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(GpuSelection::List(ids))
}

/// Parses a `rund.io/rdma-devices` value.
pub fn parse_rdma_selection(value: &str) -> Result<RdmaSelection> {
    let v = value.trim();
    match v {
        "" | "none" => return Ok(RdmaSelection::Nothing),
        "all" => return Ok(RdmaSelection::All),
        _ => {}
    }
    let mut ids = Vec::new();
    for item in v.split(',').map(str::trim) {
        let id = match item.strip_prefix("netdev:") {
            Some(nd) if plain_name(nd) && nd.len() < 16 => RdmaId::Netdev(nd.to_string()),
            Some(nd) => {
                return Err(invalid(
                    rund_annotations::RDMA_DEVICES,
                    value,
                    format!("bad netdev name {nd:?}"),
                ))
            }
            None if item == "all" => {
                return Err(invalid(
                    rund_annotations::RDMA_DEVICES,
                    value,
                    "\"all\" cannot be combined with names",
                ))
            }
            None if plain_name(item) && !item.contains(':') => RdmaId::Device(item.to_string()),
            None => {
                return Err(invalid(
                    rund_annotations::RDMA_DEVICES,
                    value,
                    format!("bad RDMA device name {item:?}"),
                ))
            }
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(RdmaSelection::List(ids))
}

impl DeviceRequest {
    /// Reads the request out of a spec. Pure: touches no host state.
    pub fn from_spec(spec: &Spec) -> Result<DeviceRequest> {
        let env = spec
            .process()
            .as_ref()
            .and_then(|p| p.env().clone())
            .unwrap_or_default();
        // Later entries win, as with execve.
        let env_get = |key: &str| {
            env.iter()
                .rev()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
        };
        let ann = spec.annotations().clone().unwrap_or_default();

        let gpus = match ann.get(rund_annotations::GPUS) {
            Some(v) => parse_gpu_selection(rund_annotations::GPUS, v)?,
            None => match env_get(VISIBLE_DEVICES_ENV) {
                Some(v) => parse_gpu_selection(VISIBLE_DEVICES_ENV, &v)?,
                None => GpuSelection::Nothing,
            },
        };
        let capabilities = match env_get(CAPABILITIES_ENV) {
            Some(v) => DriverCapabilities::parse(&v)?,
            None => DriverCapabilities::default(),
        };
        let rdma = match ann.get(rund_annotations::RDMA_DEVICES) {
            Some(v) => parse_rdma_selection(v)?,
            None => RdmaSelection::Nothing,
        };
        let mut keys: Vec<&String> = ann
            .keys()
            .filter(|k| k.starts_with(rund_annotations::CDI_PREFIX))
            .collect();
        keys.sort();
        let mut cdi_devices = Vec::new();
        for key in keys {
            for name in ann[key].split(',').map(str::trim) {
                let parsed =
                    CdiName::parse(name).map_err(|reason| DeviceError::MalformedCdiName {
                        name: name.into(),
                        origin: format!("annotation {key}"),
                        reason,
                    })?;
                if !cdi_devices.contains(&parsed) {
                    cdi_devices.push(parsed);
                }
            }
        }
        Ok(DeviceRequest {
            gpus,
            capabilities,
            rdma,
            cdi_devices,
        })
    }

    /// True when the container gets RDMA devices (directly or through a CDI rdma kind):
    /// the shim then applies the memlock default and the write_bw gate.
    pub fn wants_rdma(&self) -> bool {
        self.rdma != RdmaSelection::Nothing
            || self.cdi_devices.iter().any(|n| n.class.contains("rdma"))
    }

    /// True when NVML must be loaded to resolve the request.
    pub fn needs_nvml(&self) -> bool {
        matches!(self.gpus, GpuSelection::All | GpuSelection::List(_))
    }

    /// True when nothing at all is requested.
    pub fn is_empty(&self) -> bool {
        self.gpus == GpuSelection::Nothing
            && self.rdma == RdmaSelection::Nothing
            && self.cdi_devices.is_empty()
    }
}

#[cfg(test)]
mod tests;
