//! Device nodes and the standard symlinks in a container's tmpfs /dev.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::stat::SFlag;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType};

use super::paths::secure_join;
use crate::sys::Syscall;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {path}: {op} failed: {errno}")]
    Sys {
        path: String,
        op: &'static str,
        errno: Errno,
    },
    #[error("device {path}: user namespace sandboxes cannot mknod and the shim passed no fd (FdKind::Device) to bind-mount")]
    NoFd { path: String },
}

/// One device node to provide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub path: String,
    pub kind: SFlag,
    pub major: i64,
    pub minor: i64,
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

const DEFAULTS: [(&str, i64, i64); 6] = [
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
];

const LINKS: [(&str, &str); 5] = [
    ("/proc/self/fd", "/dev/fd"),
    ("/proc/self/fd/0", "/dev/stdin"),
    ("/proc/self/fd/1", "/dev/stdout"),
    ("/proc/self/fd/2", "/dev/stderr"),
    ("pts/ptmx", "/dev/ptmx"),
];

/// The default devices, then `linux.devices` (a spec entry overrides a default).
pub fn plan(spec_devices: &[LinuxDevice]) -> Vec<Node> {
    let mut nodes: Vec<Node> = DEFAULTS
        .iter()
        .map(|(p, ma, mi)| Node {
            path: p.to_string(),
            kind: SFlag::S_IFCHR,
            major: *ma,
            minor: *mi,
            mode: 0o666,
            uid: None,
            gid: None,
        })
        .collect();
    for d in spec_devices {
        let kind = match d.typ() {
            LinuxDeviceType::B => SFlag::S_IFBLK,
            LinuxDeviceType::P => SFlag::S_IFIFO,
            _ => SFlag::S_IFCHR,
        };
        let node = Node {
            path: d.path().display().to_string(),
            kind,
            major: d.major(),
            minor: d.minor(),
            mode: d.file_mode().unwrap_or(0o666),
            uid: d.uid(),
            gid: d.gid(),
        };
        nodes.retain(|n| n.path != node.path);
        nodes.push(node);
    }
    nodes
}

/// Creates the nodes (mknod, or a bind of the passed fd) and the symlinks.
/// Paths already present (e.g. bind-mounted by a spec mount) are left alone.
pub fn populate(
    sys: &dyn Syscall,
    root: &Path,
    nodes: &[Node],
    fds: &HashMap<String, OwnedFd>,
    userns: bool,
) -> Result<(), DeviceError> {
    for n in nodes {
        let err = |op, errno| DeviceError::Sys {
            path: n.path.clone(),
            op,
            errno,
        };
        let target = secure_join(root, Path::new(&n.path)).map_err(|e| err("resolve", e))?;
        if sys.exists(&target) {
            continue;
        }
        if let Some(fd) = fds.get(&n.path) {
            sys.touch(&target)
                .map_err(|e| err("create mount point", e))?;
            sys.move_mount(fd.as_fd(), &target)
                .map_err(|e| err("move_mount", e))?;
            continue;
        }
        if userns {
            return Err(DeviceError::NoFd {
                path: n.path.clone(),
            });
        }
        let dev = nix::sys::stat::makedev(n.major as u64, n.minor as u64);
        sys.mknod(&target, n.kind, n.mode & 0o7777, dev)
            .map_err(|e| err("mknod", e))?;
        if n.uid.is_some() || n.gid.is_some() {
            sys.chown(&target, n.uid, n.gid)
                .map_err(|e| err("chown", e))?;
        }
    }
    for (to, link) in LINKS {
        let target = root.join(link.trim_start_matches('/'));
        if !sys.exists(&target) {
            sys.symlink(to, &target).map_err(|errno| DeviceError::Sys {
                path: link.into(),
                op: "symlink",
                errno,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::Recorder;
    use oci_spec::runtime::LinuxDeviceBuilder;

    #[test]
    fn spec_devices_override_defaults() {
        let fuse = LinuxDeviceBuilder::default()
            .path("/dev/fuse")
            .typ(LinuxDeviceType::C)
            .major(10)
            .minor(229)
            .build()
            .unwrap();
        let null = LinuxDeviceBuilder::default()
            .path("/dev/null")
            .typ(LinuxDeviceType::C)
            .major(1)
            .minor(3)
            .file_mode(0o600u32)
            .build()
            .unwrap();
        let nodes = plan(&[fuse, null]);
        assert_eq!(nodes.len(), 7);
        assert_eq!(nodes.iter().filter(|n| n.path == "/dev/null").count(), 1);
        assert_eq!(nodes.last().unwrap().mode, 0o600);
    }

    #[test]
    fn mknod_without_userns_and_links() {
        let rec = Recorder::default();
        populate(&rec, Path::new("/r"), &plan(&[]), &HashMap::new(), false).unwrap();
        let calls = rec.calls();
        assert_eq!(
            calls[0],
            format!(
                "mknod /r/dev/null 20000 666 {:#x}",
                nix::sys::stat::makedev(1, 3)
            )
        );
        assert!(calls.contains(&"symlink /r/dev/ptmx -> pts/ptmx".to_string()));
        assert!(calls.contains(&"symlink /r/dev/fd -> /proc/self/fd".to_string()));
    }

    #[test]
    fn userns_binds_passed_fds_and_refuses_missing_ones() {
        let rec = Recorder::default();
        let mut fds = HashMap::new();
        for (p, _, _) in DEFAULTS {
            fds.insert(
                p.to_string(),
                OwnedFd::from(std::fs::File::open("/dev/null").unwrap()),
            );
        }
        populate(&rec, Path::new("/r"), &plan(&[]), &fds, true).unwrap();
        assert!(rec.calls().iter().all(|c| !c.starts_with("mknod")));
        fds.remove("/dev/tty");
        let err = populate(
            &Recorder::default(),
            Path::new("/r"),
            &plan(&[]),
            &fds,
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/dev/tty"), "{err}");
    }
}
