//! Device nodes and the standard symlinks in a container's tmpfs /dev.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::stat::SFlag;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType};

use super::paths::Create;
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

/// Creates the nodes (mknod, or a bind of the passed fd) and the symlinks
/// beneath `root` (the container's rootfs fd). Paths already present (e.g.
/// bind-mounted by a spec mount) are left alone.
pub fn populate(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
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
        let path = Path::new(&n.path);
        match sys.resolve(root, path, Create::No) {
            Ok(_) => continue,
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(err("resolve", e)),
        }
        if let Some(fd) = fds.get(&n.path) {
            let target = sys
                .resolve(root, path, Create::File)
                .map_err(|e| err("create mount point", e))?;
            sys.move_mount(fd.as_fd(), target.as_fd())
                .map_err(|e| err("move_mount", e))?;
            continue;
        }
        if userns {
            return Err(DeviceError::NoFd {
                path: n.path.clone(),
            });
        }
        let (dir, name) = parent_and_name(sys, root, path).map_err(|e| err("resolve parent", e))?;
        let dev = nix::sys::stat::makedev(n.major as u64, n.minor as u64);
        sys.mknodat(dir.as_fd(), &name, n.kind, n.mode & 0o7777, dev)
            .map_err(|e| err("mknod", e))?;
        if n.uid.is_some() || n.gid.is_some() {
            sys.chownat(dir.as_fd(), &name, n.uid, n.gid)
                .map_err(|e| err("chown", e))?;
        }
    }
    for (to, link) in LINKS {
        let (dir, name) =
            parent_and_name(sys, root, Path::new(link)).map_err(|errno| DeviceError::Sys {
                path: link.into(),
                op: "resolve parent",
                errno,
            })?;
        sys.symlinkat(to, dir.as_fd(), &name)
            .map_err(|errno| DeviceError::Sys {
                path: link.into(),
                op: "symlink",
                errno,
            })?;
    }
    Ok(())
}

/// The parent dir of `path` (created if missing) as an fd, and the last name.
fn parent_and_name(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
    path: &Path,
) -> Result<(OwnedFd, String), Errno> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or(Errno::EINVAL)?
        .to_string();
    let parent = path.parent().unwrap_or(Path::new("/"));
    Ok((sys.resolve(root, parent, Create::Dir)?, name))
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
        let root = rec.dir("/r");
        rec.seed_dir("/r/dev");
        populate(&rec, root.as_fd(), &plan(&[]), &HashMap::new(), false).unwrap();
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
        let root = rec.dir("/r");
        let mut fds = HashMap::new();
        for (p, _, _) in DEFAULTS {
            fds.insert(
                p.to_string(),
                OwnedFd::from(std::fs::File::open("/dev/null").unwrap()),
            );
        }
        populate(&rec, root.as_fd(), &plan(&[]), &fds, true).unwrap();
        assert!(rec.calls().iter().all(|c| !c.starts_with("mknod")));
        assert!(
            rec.calls().contains(&"touch /r/dev/null".to_string()),
            "{:?}",
            rec.calls()
        );
        fds.remove("/dev/tty");
        let rec = Recorder::default();
        let root = rec.dir("/r");
        let err = populate(&rec, root.as_fd(), &plan(&[]), &fds, true).unwrap_err();
        assert!(err.to_string().contains("/dev/tty"), "{err}");
    }
}
