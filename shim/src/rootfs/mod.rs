//! The container's root filesystem on the host side: containerd's rootfs
//! mounts at `<bundle>/rootfs`, and detached mount trees (open_tree) that
//! the agent attaches inside the container's mount namespace.

pub mod detached;
pub mod idmapped;

use std::path::{Path, PathBuf};

use containerd_shim_protos::types::mount::Mount;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub use detached::open_tree_clone;
pub use idmapped::unstage_all;

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("rootfs {0} does not exist or is not a directory")]
    Missing(String),
    #[error("mounting rootfs {kind} at {target}: {source}")]
    Mount {
        kind: String,
        target: String,
        source: nix::Error,
    },
    #[error("unmounting {target}: {source}")]
    Unmount { target: String, source: nix::Error },
    #[error("cloning mount {path}: {source}")]
    OpenTree {
        path: String,
        source: std::io::Error,
    },
    #[error("bind mount source {path} for {dest}: {reason}")]
    BindSource {
        path: String,
        dest: String,
        reason: String,
    },
    #[error("{0}")]
    Unsupported(String),
}

/// Mounts containerd's rootfs mounts at `<bundle>/rootfs`. Returns the
/// directory to use as the root, and whether we mounted it (and so must
/// unmount it on delete).
pub fn prepare(
    bundle: &Path,
    mounts: &[Mount],
    spec_root: &Path,
) -> Result<(PathBuf, bool), RootfsError> {
    if mounts.is_empty() {
        let root = if spec_root.is_absolute() {
            spec_root.to_path_buf()
        } else {
            bundle.join(spec_root)
        };
        if !root.is_dir() {
            return Err(RootfsError::Missing(root.display().to_string()));
        }
        return Ok((root, false));
    }
    if mounts.len() > 1 {
        return Err(RootfsError::Unsupported(format!(
            "{} rootfs mounts; rund takes exactly one (overlay or bind)",
            mounts.len()
        )));
    }
    let target = bundle.join("rootfs");
    std::fs::create_dir_all(&target).map_err(|e| RootfsError::Mount {
        kind: "mkdir".into(),
        target: target.display().to_string(),
        source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    let m = &mounts[0];
    let (flags, data) = parse_options(&m.options);
    let kind = m.type_.as_str();
    let fstype = if kind == "bind" || kind.is_empty() {
        None
    } else {
        Some(kind)
    };
    let mut flags = flags;
    if kind == "bind" {
        flags |= MsFlags::MS_BIND;
    }
    let result = mount(
        Some(m.source.as_str()),
        &target,
        fstype,
        flags & !MsFlags::MS_RDONLY,
        if data.is_empty() {
            None
        } else {
            Some(data.as_str())
        },
    );
    result.map_err(|source| RootfsError::Mount {
        kind: kind.to_string(),
        target: target.display().to_string(),
        source,
    })?;
    if flags.contains(MsFlags::MS_RDONLY) {
        let remount = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        if let Err(source) = mount(None::<&str>, &target, None::<&str>, remount, None::<&str>) {
            let _ = umount2(&target, MntFlags::MNT_DETACH);
            return Err(RootfsError::Mount {
                kind: "remount ro".into(),
                target: target.display().to_string(),
                source,
            });
        }
    }
    Ok((target, true))
}

/// Unmounts `<bundle>/rootfs` if something is mounted there. Idempotent.
pub fn cleanup(bundle: &Path) -> Result<(), RootfsError> {
    let target = bundle.join("rootfs");
    loop {
        match umount2(&target, MntFlags::MNT_DETACH) {
            Ok(()) => continue, // stacked mounts: peel them all
            Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => return Ok(()),
            Err(source) => {
                return Err(RootfsError::Unmount {
                    target: target.display().to_string(),
                    source,
                })
            }
        }
    }
}

/// Splits mount(8)-style options into flags and filesystem data.
pub fn parse_options(options: &[String]) -> (MsFlags, String) {
    let mut flags = MsFlags::empty();
    let mut data = Vec::new();
    for o in options {
        let (set, clear) = match o.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "bind" => (MsFlags::MS_BIND, MsFlags::empty()),
            "rbind" => (MsFlags::MS_BIND | MsFlags::MS_REC, MsFlags::empty()),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "suid" | "dev" | "exec" | "defaults" => (MsFlags::empty(), MsFlags::empty()),
            other => {
                data.push(other.to_string());
                (MsFlags::empty(), MsFlags::empty())
            }
        };
        flags = (flags | set) & !clear;
    }
    (flags, data.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_split_into_flags_and_data() {
        let opts: Vec<String> = ["ro", "nosuid", "lowerdir=/a:/b", "upperdir=/u", "rbind"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (f, d) = parse_options(&opts);
        assert!(f.contains(
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_BIND | MsFlags::MS_REC
        ));
        assert_eq!(d, "lowerdir=/a:/b,upperdir=/u");
        let (f, _) = parse_options(&["ro".into(), "rw".into()]);
        assert!(!f.contains(MsFlags::MS_RDONLY));
    }

    #[test]
    fn missing_rootfs_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let e = prepare(dir.path(), &[], Path::new("nope")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn cleanup_without_mount_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        cleanup(dir.path()).unwrap();
        cleanup(dir.path()).unwrap();
    }
}
