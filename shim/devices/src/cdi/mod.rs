//! CDI: spec files from the configured dirs (JSON or YAML, parsed with serde and validated
//! here), resolution of names, and edits to the OCI spec.

mod apply;
mod generate;
pub mod schema;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schema::{ContainerEdits, Device as CdiDevice};

use crate::error::{DeviceError, Result};
use crate::select::CdiName;

pub use apply::{apply_cdi, CdiNodeInfo};
pub use generate::{
    cdi_generate, gpu_cdi_spec, rdma_cdi_spec, GenerateReport, GPU_KIND, RDMA_KIND,
};
pub use validate::{validate, VERSIONS};

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
    devices: BTreeMap<String, Loaded>,
    /// Names defined twice at the same priority: unusable, as the CDI spec says.
    conflicts: BTreeMap<String, Vec<String>>,
    /// Spec files that failed to load; they only matter if one of their devices is asked for.
    pub errors: Vec<DeviceError>,
}

/// One device and the spec file it came from.
#[derive(Debug, Clone)]
struct Loaded {
    priority: usize,
    spec_path: String,
    spec_edits: Option<ContainerEdits>,
    device: CdiDevice,
}

fn is_cdi_spec(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("json" | "yaml")
    )
}

/// Reads, parses (YAML is a superset of JSON, and its errors carry the field's path) and
/// validates one spec file.
pub fn read_spec(path: &Path) -> Result<schema::Spec> {
    let err = |reason: String| DeviceError::CdiSpec {
        path: path.to_path_buf(),
        reason,
    };
    let data = std::fs::read(path).map_err(|e| err(format!("read: {e}")))?;
    let spec: schema::Spec = serde_yaml::from_slice(&data).map_err(|e| err(e.to_string()))?;
    validate::validate(&spec).map_err(err)?;
    Ok(spec)
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
            for path in spec_files(dir) {
                let spec = match read_spec(&path) {
                    Ok(s) => s,
                    Err(e) => {
                        reg.errors.push(e);
                        continue;
                    }
                };
                let here = path.display().to_string();
                for dev in &spec.devices {
                    let name = format!("{}={}", spec.kind, dev.name);
                    match reg.devices.get(&name) {
                        Some(old) if old.priority == priority => {
                            reg.conflicts
                                .entry(name.clone())
                                .or_insert_with(|| vec![old.spec_path.clone()])
                                .push(here.clone());
                        }
                        _ => {
                            reg.conflicts.remove(&name);
                            let loaded = Loaded {
                                priority,
                                spec_path: here.clone(),
                                spec_edits: spec.container_edits.clone(),
                                device: dev.clone(),
                            };
                            reg.devices.insert(name, loaded);
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
                let dev = self.devices.get(&name).ok_or_else(|| {
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
                Ok(ResolvedCdi {
                    spec_path: dev.spec_path.clone(),
                    spec_edits: dev.spec_edits.clone(),
                    device_edits: dev.device.container_edits.clone(),
                    name,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
