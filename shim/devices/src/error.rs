//! Typed errors of the devices crate.

use std::path::PathBuf;

/// Every failure of discovery, selection, resolution, injection and CDI.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// GPUs were requested but NVML could not be loaded or initialised.
    #[error("GPUs were requested but NVML is unavailable ({library}): {reason}")]
    NvmlUnavailable { library: String, reason: String },

    /// An NVML call failed after initialisation.
    #[error("NVML {call} failed: {reason}")]
    Nvml { call: String, reason: String },

    /// The helper that runs NVML for the shim (`rund helper nvml`) failed.
    #[error("GPU discovery helper {program} failed: {reason}")]
    Helper { program: String, reason: String },

    /// A requested GPU (index or UUID) is not on this host.
    #[error("unknown GPU {id:?} (available: {available})")]
    UnknownGpu { id: String, available: String },

    /// `all` GPUs were requested but NVML reports none.
    #[error("all GPUs were requested but NVML reports none on this host")]
    NoGpus,

    /// A requested RDMA device is not under sysfs.
    #[error("unknown RDMA device {name:?} (available: {available})")]
    UnknownRdmaDevice { name: String, available: String },

    /// A requested netdev has no RDMA device behind it.
    #[error("no RDMA device behind netdev {netdev:?} (netdevs with RDMA: {available})")]
    UnknownNetdev { netdev: String, available: String },

    /// `all` RDMA devices were requested but sysfs lists none.
    #[error("all RDMA devices were requested but {path} lists none")]
    NoRdmaDevices { path: PathBuf },

    /// A required char device has no major:minor we can find.
    #[error("cannot find major:minor of {what}: {reason}")]
    MissingDevNumber { what: String, reason: String },

    /// The request in the spec (env or annotation) cannot be parsed.
    #[error("invalid {source_name} value {value:?}: {reason}")]
    InvalidRequest {
        source_name: String,
        value: String,
        reason: String,
    },

    /// A CDI name is not `vendor/class=name`.
    #[error("malformed CDI device name {name:?} in {origin}: {reason}")]
    MalformedCdiName {
        name: String,
        origin: String,
        reason: String,
    },

    /// A CDI device is not in any spec file of the configured dirs.
    #[error("unresolvable CDI device {name:?} (known: {known}; spec dirs: {dirs})")]
    UnknownCdiDevice {
        name: String,
        known: String,
        dirs: String,
    },

    /// A CDI spec file could not be read or is invalid.
    #[error("CDI spec {path}: {reason}")]
    CdiSpec { path: PathBuf, reason: String },

    /// Applying CDI container edits failed.
    #[error("CDI edits for {names}: {reason}")]
    CdiApply { names: String, reason: String },

    /// The OCI spec could not be converted or edited.
    #[error("OCI spec edit failed: {0}")]
    Spec(String),

    /// An I/O error on a named path.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DeviceError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DeviceError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;
