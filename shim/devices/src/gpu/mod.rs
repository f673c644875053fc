//! NVIDIA GPUs: NVML discovery, control nodes and driver files.

mod caps;
mod driver;
pub mod helper;
mod nvml;

use serde::{Deserialize, Serialize};

use crate::devnode::DeviceNode;

pub use caps::{Capability, DriverCapabilities};
pub use driver::{driver_files, gpu_control_nodes, nvidia_major, DriverFile, DriverFileKind};
pub use helper::{GpuSource, InProcessNvml, NvmlHelper};
pub use nvml::{discover_gpus, probe_nvml, NvmlProbe};

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML index (enumeration order; not the device minor).
    pub index: u32,
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    pub name: String,
    /// e.g. `00000000:3B:00.0`.
    pub pci_bus_id: String,
    pub memory_total_bytes: u64,
    /// From `nvmlDeviceGetMinorNumber`: the node is `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `/dev/nvidia<minor>`.
    pub node: DeviceNode,
}
