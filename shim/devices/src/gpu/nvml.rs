//! NVML through nvml-wrapper. Only called when GPUs are requested or listed.

use std::ffi::OsStr;

use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use super::{driver::nvidia_major, Gpu};
use crate::config::DeviceConfig;
use crate::devnode::{DeviceNode, ProcDevices};
use crate::error::{DeviceError, Result};

const GPU_MODE: u32 = 0o666;

/// What one NVML session saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlProbe {
    pub library: String,
    pub driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

fn call_err(call: &'static str) -> impl Fn(nvml_wrapper::error::NvmlError) -> DeviceError {
    move |e| DeviceError::Nvml {
        call: call.into(),
        reason: e.to_string(),
    }
}

/// Loads NVML from `cfg.nvml_library`, lists the GPUs and shuts NVML down again.
pub fn probe_nvml(cfg: &DeviceConfig) -> Result<NvmlProbe> {
    let nvml = Nvml::builder()
        .lib_path(OsStr::new(&cfg.nvml_library))
        .init()
        .map_err(|e| DeviceError::NvmlUnavailable {
            library: cfg.nvml_library.clone(),
            reason: e.to_string(),
        })?;
    let major = nvidia_major(&ProcDevices::read(&cfg.proc_devices)?);
    let count = nvml
        .device_count()
        .map_err(call_err("nvmlDeviceGetCount_v2"))?;
    let mut gpus = Vec::with_capacity(count as usize);
    for index in 0..count {
        let dev = nvml
            .device_by_index(index)
            .map_err(call_err("nvmlDeviceGetHandleByIndex_v2"))?;
        let minor = dev
            .minor_number()
            .map_err(call_err("nvmlDeviceGetMinorNumber"))?;
        let path = format!("/dev/nvidia{minor}");
        gpus.push(Gpu {
            index,
            uuid: dev.uuid().map_err(call_err("nvmlDeviceGetUUID"))?,
            name: dev.name().map_err(call_err("nvmlDeviceGetName"))?,
            pci_bus_id: dev
                .pci_info()
                .map_err(call_err("nvmlDeviceGetPciInfo_v3"))?
                .bus_id,
            memory_total_bytes: dev
                .memory_info()
                .map_err(call_err("nvmlDeviceGetMemoryInfo_v2"))?
                .total,
            minor,
            node: DeviceNode {
                host_path: cfg.host_dev_path(&path),
                path,
                major,
                minor: i64::from(minor),
                file_mode: GPU_MODE,
            },
        });
    }
    let driver_version = nvml.sys_driver_version().ok();
    // Explicit shutdown so an error is logged rather than ignored by Drop.
    if let Err(e) = nvml.shutdown() {
        tracing::warn!(error = %e, "nvmlShutdown failed");
    }
    Ok(NvmlProbe {
        library: cfg.nvml_library.clone(),
        driver_version,
        gpus,
    })
}

/// The GPUs NVML reports, with `/dev/nvidia<minor>` nodes.
pub fn discover_gpus(cfg: &DeviceConfig) -> Result<Vec<Gpu>> {
    probe_nvml(cfg).map(|p| p.gpus)
}
