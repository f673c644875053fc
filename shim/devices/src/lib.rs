//! rund-devices: GPU (NVML) and RDMA (sysfs) discovery, selection from the OCI spec,
//! injection as OCI spec edits, and CDI (read, apply, generate).
//!
//! Flow for one container: [`DeviceRequest::from_spec`] → [`resolve`] → [`inject`].
//! Asking for nothing never loads NVML or reads sysfs.

pub mod cdi;
pub mod config;
pub mod devnode;
pub mod error;
pub mod gpu;
pub mod inject;
pub mod rdma;
pub mod resolve;
pub mod select;

#[cfg(any(test, feature = "test-support"))]
pub mod testutil;

pub use cdi::{cdi_generate, CdiRegistry, GenerateReport};
pub use config::DeviceConfig;
pub use devnode::DeviceNode;
pub use error::{DeviceError, Result};
pub use gpu::{discover_gpus, Gpu};
pub use inject::{inject, InjectedDevice, InjectionReport};
pub use rdma::{discover_rdma, RdmaDevice, RdmaPort};
pub use resolve::{resolve, resolve_with, Resolved};
pub use select::DeviceRequest;

/// Parses, resolves and injects in one go, with NVML in this process.
/// Returns the request too, for `wants_rdma()` (memlock default, write_bw gate).
pub fn prepare_spec(
    cfg: &DeviceConfig,
    spec: &mut oci_spec::runtime::Spec,
    userns: bool,
) -> Result<(DeviceRequest, InjectionReport)> {
    let req = DeviceRequest::from_spec(spec)?;
    if req.is_empty() {
        return Ok((req, InjectionReport::default()));
    }
    let resolved = resolve(cfg, &req)?;
    let report = inject(spec, &resolved, userns)?;
    Ok((req, report))
}
