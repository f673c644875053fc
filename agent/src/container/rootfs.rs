//! Building a container's filesystem view, in its fresh mount namespace (a
//! copy of the agent's tiny root): attach the rootfs, do the OCI mounts,
//! /dev, masked and read-only paths, then pivot_root into it.

use std::os::fd::AsFd;
use std::path::Path;

use nix::mount::MsFlags;
use oci_spec::runtime::Spec;
use rund_proto::ContainerOptions;

use super::devices;
use super::fds::PassedFds;
use super::mounts::{self, MountCtx};
use super::paths::secure_join;
use crate::sys::raw::{self, MOUNT_ATTR_RDONLY};
use crate::sys::{Linux, Syscall};

/// The empty dir of the agent's root where a container rootfs is attached
/// (each container has its own mount namespace, so one dir serves all).
pub const ATTACH_DIR: &str = "/rootfs";

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("no rootfs: the shim passed no FdKind::Rootfs fd")]
    NoRootfs,
    #[error("{op}: {errno}")]
    Sys {
        op: String,
        errno: nix::errno::Errno,
    },
    #[error(transparent)]
    Mount(#[from] mounts::MountError),
    #[error(transparent)]
    Device(#[from] devices::DeviceError),
    #[error("{0}")]
    Hook(String),
}

fn sys(op: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> RootfsError {
    let op = op.into();
    move |errno| RootfsError::Sys { op, errno }
}

/// Everything up to and including pivot_root. On return the process' root
/// is the container rootfs and its cwd is `/`. `before_pivot` runs once the
/// mounts are done (the shim's runtime-namespace hooks pause there).
pub fn build(
    spec: &Spec,
    opts: &ContainerOptions,
    fds: &PassedFds,
    before_pivot: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), RootfsError> {
    let linux = Linux;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make / rprivate"))?;
    let root = Path::new(ATTACH_DIR);
    let rootfs = fds.rootfs.as_ref().ok_or(RootfsError::NoRootfs)?;
    linux
        .move_mount(rootfs.as_fd(), root)
        .map_err(sys("attach rootfs (move_mount)"))?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let steps = mounts::plan(spec.mounts().as_deref().unwrap_or_default())?;
    let ctx = MountCtx {
        sys: &linux,
        root,
        fds: &fds.mounts,
        cgroups: &cgroups,
    };
    let dev_tmpfs = ctx.apply(&steps)?;
    let linux_spec = spec.linux().as_ref();
    if dev_tmpfs {
        let nodes = devices::plan(
            linux_spec
                .and_then(|l| l.devices().as_deref())
                .unwrap_or_default(),
        );
        devices::populate(&linux, root, &nodes, &fds.devices, opts.userns)?;
    }
    before_pivot().map_err(RootfsError::Hook)?;
    for p in linux_spec
        .and_then(|l| l.masked_paths().as_ref())
        .into_iter()
        .flatten()
    {
        mask(root, p)?;
    }
    for p in linux_spec
        .and_then(|l| l.readonly_paths().as_ref())
        .into_iter()
        .flatten()
    {
        readonly(root, p)?;
    }
    if spec
        .root()
        .as_ref()
        .is_some_and(|r| r.readonly().unwrap_or(false))
    {
        raw::mount_setattr(root, MOUNT_ATTR_RDONLY, 0, false)
            .map_err(sys("make rootfs read-only"))?;
    }
    nix::unistd::chdir(root).map_err(sys("chdir rootfs"))?;
    raw::pivot_here().map_err(sys("pivot_root"))?;
    Ok(())
}

/// Masks a path: /dev/null over files, an empty read-only tmpfs over dirs.
fn mask(root: &Path, p: &str) -> Result<(), RootfsError> {
    let target = secure_join(root, Path::new(p)).map_err(sys(format!("masked path {p}")))?;
    let Ok(md) = target.metadata() else {
        return Ok(());
    };
    let r = if md.is_dir() {
        nix::mount::mount(
            Some("tmpfs"),
            &target,
            Some("tmpfs"),
            MsFlags::MS_RDONLY,
            Some("size=0"),
        )
    } else {
        nix::mount::mount(
            Some("/dev/null"),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
    };
    r.map_err(sys(format!("mask {p}")))
}

/// Makes a path read-only: a recursive self-bind made read-only.
fn readonly(root: &Path, p: &str) -> Result<(), RootfsError> {
    let target = secure_join(root, Path::new(p)).map_err(sys(format!("readonly path {p}")))?;
    if target.symlink_metadata().is_err() {
        return Ok(());
    }
    nix::mount::mount(
        Some(&target),
        &target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(sys(format!("bind {p}")))?;
    raw::mount_setattr(&target, MOUNT_ATTR_RDONLY, 0, true)
        .map_err(sys(format!("make {p} read-only")))
}

/// linux.sysctl, written after pivot_root through the container's /proc.
pub fn sysctl(spec: &Spec) -> Result<(), RootfsError> {
    for (k, v) in spec
        .linux()
        .as_ref()
        .and_then(|l| l.sysctl().as_ref())
        .into_iter()
        .flatten()
    {
        let path = Path::new("/proc/sys").join(k.replace('.', "/"));
        std::fs::write(&path, v).map_err(|e| RootfsError::Sys {
            op: format!("sysctl {k}={v} ({})", path.display()),
            errno: crate::sys::io_errno(e),
        })?;
    }
    Ok(())
}
