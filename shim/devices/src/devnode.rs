//! Char device numbers: sysfs `dev` files, stat of nodes, and `/proc/devices`.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{DeviceError, Result};

/// A char device node to expose in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    /// Path inside the container, e.g. `/dev/nvidia3`.
    pub path: String,
    /// Path on the host (under the configured dev root); bind-mounted under userns.
    pub host_path: PathBuf,
    pub major: i64,
    pub minor: i64,
    /// File mode of the node created by the runtime.
    pub file_mode: u32,
}

/// Parses a sysfs `dev` file body such as `231:192\n`.
pub fn parse_dev_numbers(text: &str) -> Option<(i64, i64)> {
    let (maj, min) = text.trim().split_once(':')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// Reads `major:minor` from a sysfs `dev` file.
pub fn read_sysfs_dev(path: &Path) -> Result<(i64, i64)> {
    let text = std::fs::read_to_string(path).map_err(|e| DeviceError::io("read", path, e))?;
    parse_dev_numbers(&text).ok_or_else(|| DeviceError::MissingDevNumber {
        what: path.display().to_string(),
        reason: format!("unparsable contents {:?}", text.trim()),
    })
}

/// Reads `major:minor` of a char device node by stat.
pub fn stat_char_dev(path: &Path) -> Result<(i64, i64)> {
    let md = std::fs::metadata(path).map_err(|e| DeviceError::io("stat", path, e))?;
    if !md.file_type().is_char_device() {
        return Err(DeviceError::MissingDevNumber {
            what: path.display().to_string(),
            reason: "not a char device".into(),
        });
    }
    let rdev = md.rdev();
    Ok((
        i64::from(nix::sys::stat::major(rdev) as u32),
        i64::from(nix::sys::stat::minor(rdev) as u32),
    ))
}

/// Prefers the sysfs `dev` file (authoritative), falls back to the node.
pub fn dev_numbers(sysfs_dev: &Path, node: &Path) -> Result<(i64, i64)> {
    match read_sysfs_dev(sysfs_dev) {
        Ok(n) => Ok(n),
        Err(first) => stat_char_dev(node).map_err(|second| DeviceError::MissingDevNumber {
            what: node.display().to_string(),
            reason: format!("{first}; {second}"),
        }),
    }
}

/// The char device section of `/proc/devices`: (major, name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcDevices {
    pub char_majors: Vec<(i64, String)>,
}

impl ProcDevices {
    /// Parses the text of `/proc/devices` (only the "Character devices:" block).
    pub fn parse(text: &str) -> Self {
        let mut in_char = false;
        let mut char_majors = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.ends_with(':') {
                in_char = line == "Character devices:";
                continue;
            }
            if !in_char {
                continue;
            }
            if let Some((maj, name)) = line.split_once(char::is_whitespace) {
                if let Ok(maj) = maj.parse() {
                    char_majors.push((maj, name.trim().to_string()));
                }
            }
        }
        ProcDevices { char_majors }
    }

    /// Reads and parses a `/proc/devices` file; a missing file yields an empty table.
    pub fn read(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(DeviceError::io("read", path, e)),
        }
    }

    /// The major registered under `name`, if any.
    pub fn major(&self, name: &str) -> Option<i64> {
        self.char_majors
            .iter()
            .find(|(_, n)| n == name)
            .map(|(m, _)| *m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dev_file() {
        assert_eq!(parse_dev_numbers("231:192\n"), Some((231, 192)));
        assert_eq!(parse_dev_numbers("231"), None);
        assert_eq!(parse_dev_numbers("a:1"), None);
    }

    #[test]
    fn parses_proc_devices_char_block_only() {
        let text = "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n509 blk\n";
        let pd = ProcDevices::parse(text);
        assert_eq!(pd.major("nvidia-uvm"), Some(509));
        assert_eq!(pd.major("nvidia-frontend"), Some(195));
        assert_eq!(pd.major("sd"), None, "block majors must not leak in");
        assert_eq!(pd.major("missing"), None);
    }

    #[test]
    fn stat_rejects_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        assert!(matches!(
            stat_char_dev(&f),
            Err(DeviceError::MissingDevNumber { .. })
        ));
        let (maj, min) = stat_char_dev(Path::new("/dev/null")).unwrap();
        assert_eq!((maj, min), (1, 3));
    }
}
