//! Control nodes (`/dev/nvidiactl`, uvm, modeset) and driver files on the host.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::caps::{Capability, DriverCapabilities};
use crate::config::DeviceConfig;
use crate::devnode::{DeviceNode, ProcDevices};

/// The static NVIDIA major, used when `/proc/devices` does not list it.
const NVIDIA_MAJOR: i64 = 195;
const MODE: u32 = 0o666;

/// Major of `/dev/nvidia*` from `/proc/devices` (`nvidia-frontend` or `nvidia`), else 195.
pub fn nvidia_major(pd: &ProcDevices) -> i64 {
    pd.major("nvidia-frontend")
        .or_else(|| pd.major("nvidia"))
        .unwrap_or(NVIDIA_MAJOR)
}

fn node(cfg: &DeviceConfig, path: &str, major: i64, minor: i64) -> DeviceNode {
    DeviceNode {
        path: path.to_string(),
        host_path: cfg.host_dev_path(path),
        major,
        minor,
        file_mode: MODE,
    }
}

/// The control nodes, plus warnings for the ones that cannot be provided.
///
/// nvidiactl is always given. nvidia-modeset only if its host node exists (the module is
/// optional). nvidia-uvm(-tools) need the dynamic major from `/proc/devices`.
pub fn gpu_control_nodes(cfg: &DeviceConfig, pd: &ProcDevices) -> (Vec<DeviceNode>, Vec<String>) {
    let major = nvidia_major(pd);
    let mut nodes = vec![node(cfg, "/dev/nvidiactl", major, 255)];
    let mut warnings = Vec::new();
    let modeset = node(cfg, "/dev/nvidia-modeset", major, 254);
    if modeset.host_path.exists() {
        nodes.push(modeset);
    }
    match pd.major("nvidia-uvm") {
        Some(uvm) => {
            nodes.push(node(cfg, "/dev/nvidia-uvm", uvm, 0));
            nodes.push(node(cfg, "/dev/nvidia-uvm-tools", uvm, 1));
        }
        None => warnings.push(format!(
            "nvidia-uvm is not in {} (module not loaded?): /dev/nvidia-uvm not injected, CUDA will fail",
            cfg.proc_devices.display()
        )),
    }
    (nodes, warnings)
}

/// Whether a driver file is a library or a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverFileKind {
    Library,
    Binary,
}

/// A host driver file to bind-mount read-only at the same path in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverFile {
    pub path: PathBuf,
    pub kind: DriverFileKind,
    pub capability: Capability,
}

/// Library name prefixes (matched as `<prefix>.so.*`) per capability.
fn libraries(cap: Capability) -> &'static [&'static str] {
    match cap {
        Capability::Utility => &["libnvidia-ml", "libnvidia-cfg"],
        Capability::Compute => &[
            "libcuda",
            "libcudadebugger",
            "libnvidia-ptxjitcompiler",
            "libnvidia-fatbinaryloader",
            "libnvidia-opencl",
            "libnvidia-nvvm",
            "libnvidia-gpucomp",
        ],
        Capability::Video => &[
            "libvdpau_nvidia",
            "libnvidia-encode",
            "libnvidia-opticalflow",
            "libnvcuvid",
        ],
        Capability::Graphics => &[
            "libnvidia-eglcore",
            "libnvidia-glcore",
            "libnvidia-tls",
            "libnvidia-glsi",
            "libnvidia-fbc",
            "libnvidia-ifr",
            "libnvidia-rtcore",
            "libnvoptix",
            "libGLX_nvidia",
            "libEGL_nvidia",
            "libGLESv2_nvidia",
            "libGLESv1_CM_nvidia",
            "libnvidia-glvkspirv",
        ],
        Capability::Ngx => &["libnvidia-ngx"],
        Capability::Display | Capability::Compat32 => &[],
    }
}

fn binaries(cap: Capability) -> &'static [&'static str] {
    match cap {
        Capability::Utility => &["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"],
        Capability::Compute => &["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"],
        _ => &[],
    }
}

/// Canonical, de-duplicated directories (Debian's /lib is a symlink to /usr/lib).
fn unique_dirs(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    dirs.iter()
        .filter(|d| std::fs::canonicalize(d).is_ok_and(|c| seen.insert(c)))
        .cloned()
        .collect()
}

/// Finds the driver libraries and binaries the capabilities ask for.
///
/// Versioned names (`libcuda.so.1`, `libcuda.so.550.54.15`) are matched; the bare
/// development symlink `libcuda.so` is not, as the toolkit does.
pub fn driver_files(cfg: &DeviceConfig, caps: &DriverCapabilities) -> Vec<DriverFile> {
    let mut out = Vec::new();
    let lib_dirs = unique_dirs(&cfg.host_lib_dirs);
    let bin_dirs = unique_dirs(&cfg.host_bin_dirs);
    for dir in &lib_dirs {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let Some((stem, _)) = name.split_once(".so.") else {
                continue;
            };
            if let Some(cap) = caps
                .0
                .iter()
                .copied()
                .find(|c| libraries(*c).contains(&stem))
            {
                out.push(DriverFile {
                    path: dir.join(&name),
                    kind: DriverFileKind::Library,
                    capability: cap,
                });
            }
        }
    }
    for cap in caps.0.iter().copied() {
        for bin in binaries(cap) {
            if let Some(path) = bin_dirs.iter().map(|d| d.join(bin)).find(|p| p.is_file()) {
                out.push(DriverFile {
                    path,
                    kind: DriverFileKind::Binary,
                    capability: cap,
                });
            }
        }
    }
    out
}
