//! The install manifest: what `rund install` wrote, so `rund uninstall` removes exactly that
//! and nothing a user changed since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::edit::Edit;
use super::error::{InstallError, IoCtx};
use super::fsutil;

pub const DEFAULT_PATH: &str = "/var/lib/rund/install-manifest.json";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Binary,
    RundConfig,
    DropIn,
    /// A containerd config.toml that did not exist before.
    ContainerdConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledFile {
    pub path: PathBuf,
    pub kind: FileKind,
    /// Of the content written; a file that no longer matches is left alone.
    pub sha256: String,
    /// Where a file that was there before (not ours) was moved; restored on uninstall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigEdit {
    pub path: PathBuf,
    /// The copy of config.toml taken just before the edit.
    pub backup: PathBuf,
    pub edit: Edit,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// `1.x` or `2.x`, as detected at install.
    pub containerd_line: String,
    pub files: Vec<InstalledFile>,
    pub config_edits: Vec<ConfigEdit>,
}

impl Manifest {
    pub fn new(line: &str) -> Manifest {
        Manifest {
            format: FORMAT,
            containerd_line: line.to_owned(),
            ..Manifest::default()
        }
    }

    /// `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<Manifest>, InstallError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).ctx("read install manifest", path),
        };
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| InstallError::Manifest {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if m.format != FORMAT {
            return Err(InstallError::Manifest {
                path: path.to_path_buf(),
                reason: format!("format {} (this rund reads {FORMAT})", m.format),
            });
        }
        Ok(Some(m))
    }

    pub fn save(&self, path: &Path) -> Result<(), InstallError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| InstallError::Manifest {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        fsutil::write_atomic(path, text.as_bytes(), 0o600)
    }

    pub fn file(&self, path: &Path) -> Option<&InstalledFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Record `f`, replacing an earlier record of the same path but keeping its `replaced`.
    pub fn record_file(&mut self, mut f: InstalledFile) {
        if let Some(old) = self.files.iter_mut().find(|o| o.path == f.path) {
            if f.replaced.is_none() {
                f.replaced = old.replaced.take();
            }
            *old = f;
        } else {
            self.files.push(f);
        }
    }
}
