//! Host paths the discovery reads; all configurable so tests can use fake trees.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the devices crate looks for things on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceConfig {
    /// NVML library passed to dlopen; loaded only when GPUs are requested or listed.
    pub nvml_library: String,
    /// Root of sysfs (`/sys`).
    pub sysfs_root: PathBuf,
    /// Root of the device directory (`/dev`).
    pub dev_root: PathBuf,
    /// CDI spec directories, lowest priority first (later dirs override earlier ones).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The char/block major table (`/proc/devices`).
    pub proc_devices: PathBuf,
    /// Directories searched for NVIDIA driver libraries.
    pub host_lib_dirs: Vec<PathBuf>,
    /// Directories searched for NVIDIA driver binaries.
    pub host_bin_dirs: Vec<PathBuf>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            nvml_library: "libnvidia-ml.so.1".into(),
            sysfs_root: "/sys".into(),
            dev_root: "/dev".into(),
            cdi_spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
            proc_devices: "/proc/devices".into(),
            host_lib_dirs: [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64",
                "/usr/lib",
                "/lib/x86_64-linux-gnu",
                "/lib64",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            host_bin_dirs: ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"]
                .iter()
                .map(PathBuf::from)
                .collect(),
        }
    }
}

impl DeviceConfig {
    /// The host path of a container device path such as `/dev/infiniband/uverbs0`.
    pub fn host_dev_path(&self, container_path: &str) -> PathBuf {
        let rel = container_path
            .strip_prefix("/dev/")
            .unwrap_or(container_path);
        self.dev_root.join(rel.trim_start_matches('/'))
    }
}
