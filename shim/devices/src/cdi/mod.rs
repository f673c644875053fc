//! CDI: spec files from the configured dirs (parsed and validated by the
//! `container-device-interface` crate), resolution of names, and edits to the OCI spec.

mod apply;
mod generate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use container_device_interface::container_edits::ContainerEdits;
use container_device_interface::device::Device as CdiDevice;
use container_device_interface::spec::read_spec;
use container_device_interface::utils::is_cdi_spec;

use crate::error::{DeviceError, Result};
use crate::select::CdiName;

pub use apply::{apply_cdi, CdiNodeInfo};
pub use generate::{
    cdi_generate, gpu_cdi_spec, rdma_cdi_spec, GenerateReport, GPU_KIND, RDMA_KIND,
};

/// One resolved CDI device: its own edits and those of the spec file it came from.
#[derive(Debug, Clone)]
pub struct ResolvedCdi {
    pub name: String,
    pub spec_path: String,
    pub spec_edits: Option<ContainerEdits>,
    pub device_edits: ContainerEdits,
}

/// All CDI devices found in the spec dirs.
#[derive(Debug, Default)]
pub struct CdiRegistry {
    dirs: Vec<PathBuf>,
    devices: BTreeMap<String, (i32, CdiDevice)>,
    /// Names defined twice at the same priority: unusable, as the CDI spec says.
    conflicts: BTreeMap<String, Vec<String>>,
    /// Spec files that failed to load; they only matter if one of their devices is asked for.
    pub errors: Vec<DeviceError>,
}

fn spec_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_cdi_spec(p) && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

impl CdiRegistry {
    /// Loads every `*.json` / `*.yaml` spec; later dirs have higher priority.
    pub fn load(dirs: &[PathBuf]) -> CdiRegistry {
        let mut reg = CdiRegistry {
            dirs: dirs.to_vec(),
            ..Default::default()
        };
        for (priority, dir) in dirs.iter().enumerate() {
            let priority = priority as i32;
            for path in spec_files(dir) {
                let spec = match read_spec(&path, priority) {
                    Ok(s) => s,
                    Err(e) => {
                        reg.errors.push(DeviceError::CdiSpec {
                            path,
                            reason: format!("{e:#}"),
                        });
                        continue;
                    }
                };
                for dev in spec.devices.values() {
                    let name = dev.get_qualified_name();
                    let here = spec.get_path();
                    match reg.devices.get(&name) {
                        Some((p, old)) if *p == priority => {
                            reg.conflicts
                                .entry(name.clone())
                                .or_insert_with(|| vec![old.get_spec().get_path()])
                                .push(here);
                        }
                        _ => {
                            reg.conflicts.remove(&name);
                            reg.devices.insert(name, (priority, dev.clone()));
                        }
                    }
                }
            }
        }
        reg
    }

    /// Sorted fully-qualified names of all usable devices.
    pub fn names(&self) -> Vec<String> {
        self.devices
            .keys()
            .filter(|n| !self.conflicts.contains_key(*n))
            .cloned()
            .collect()
    }

    fn dirs_text(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Resolves names; any unknown or conflicting one is an error.
    pub fn resolve(&self, names: &[CdiName]) -> Result<Vec<ResolvedCdi>> {
        names
            .iter()
            .map(|n| {
                let name = n.to_string();
                if let Some(paths) = self.conflicts.get(&name) {
                    return Err(DeviceError::CdiSpec {
                        path: PathBuf::from(&paths[0]),
                        reason: format!(
                            "device {name} is defined in several specs: {}",
                            paths.join(", ")
                        ),
                    });
                }
                let (_, dev) = self.devices.get(&name).ok_or_else(|| {
                    let mut known = self.names().join(", ");
                    if known.is_empty() {
                        known = "none".into();
                    }
                    if !self.errors.is_empty() {
                        let errs: Vec<String> = self.errors.iter().map(|e| e.to_string()).collect();
                        known = format!("{known}; unreadable specs: {}", errs.join("; "));
                    }
                    DeviceError::UnknownCdiDevice {
                        name: name.clone(),
                        known,
                        dirs: self.dirs_text(),
                    }
                })?;
                let mut spec = dev.get_spec();
                Ok(ResolvedCdi {
                    spec_path: spec.get_path(),
                    spec_edits: spec.edits(),
                    device_edits: dev.edits(),
                    name,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
