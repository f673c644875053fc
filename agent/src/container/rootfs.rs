//! Building a container's filesystem view, in its fresh mount namespace (a
//! copy of the agent's tiny root), in runc's order: attach the rootfs, the
//! OCI mounts, /dev, createContainer hooks, pivot_root, root propagation,
//! read-only mounts, sysctls, read-only paths, masked paths. Every path
//! inside the container is resolved beneath an fd of its root.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::mount::MsFlags;
use nix::sys::stat::SFlag;
use oci_spec::runtime::Spec;
use rund_proto::sysctl::SysctlError;
use rund_proto::ContainerOptions;

use super::fds::PassedFds;
use super::mounter::MountCtx;
use super::propagation::{PropagationError, RootPropagation};
use super::{devices, masks, mounts, sysctl};
use crate::sys::{Linux, Syscall};
use rund_sys::mount::MOUNT_ATTR_RDONLY;

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
    #[error(transparent)]
    Propagation(#[from] PropagationError),
    #[error(transparent)]
    Mask(#[from] masks::MaskError),
    #[error(transparent)]
    SysctlKey(#[from] SysctlError),
    #[error(transparent)]
    Sysctl(#[from] sysctl::SysctlWriteError),
}

fn sys(op: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> RootfsError {
    let op = op.into();
    move |errno| RootfsError::Sys { op, errno }
}

/// Everything up to a finished container root: on return the process' root
/// is the container rootfs and its cwd is `/`. `before_pivot` runs once the
/// mounts are done (the shim's runtime-namespace hooks pause there).
pub fn build(
    spec: &Spec,
    opts: &ContainerOptions,
    fds: &PassedFds,
    before_pivot: &mut dyn FnMut(),
) -> Result<(), RootfsError> {
    let linux = Linux;
    let lin = spec.linux().as_ref();
    let list = |v: Option<&Vec<String>>| v.cloned().unwrap_or_default();
    let masked = list(lin.and_then(|l| l.masked_paths().as_ref()));
    let readonly = list(lin.and_then(|l| l.readonly_paths().as_ref()));
    let propagation = RootPropagation::parse(
        lin.and_then(|l| l.rootfs_propagation().as_deref()),
        opts.userns,
    )?;
    let steps = mounts::plan(spec.mounts().as_deref().unwrap_or_default(), opts.userns)?;
    // Checked before anything is mounted; written after pivot_root.
    let mut sysctls: Vec<(String, String)> = lin
        .and_then(|l| l.sysctl().clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    sysctls.sort();
    // Four stats of /proc/self/ns in a fresh process: only when needed.
    let sysctl_ns = if sysctls.is_empty() {
        rund_proto::sysctl::SysctlNamespaces::default()
    } else {
        sysctl::own_namespaces(opts.userns)
    };
    for (k, _) in &sysctls {
        rund_proto::sysctl::check(k, &sysctl_ns)?;
    }

    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make / rprivate"))?;
    let rootfs = fds.rootfs.as_ref().ok_or(RootfsError::NoRootfs)?;
    let attach = linux
        .open_path(Path::new(ATTACH_DIR))
        .map_err(sys("open the attach dir"))?;
    linux
        .move_mount(rootfs.as_fd(), attach.as_fd())
        .map_err(sys("attach rootfs (move_mount)"))?;
    // The detached tree's fd now names the attached rootfs.
    let root = rootfs.as_fd();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let ctx = MountCtx {
        sys: &linux,
        root,
        fds: &fds.mounts,
        cgroups: &cgroups,
        propagation,
        userns: opts.userns,
    };
    ctx.tree_propagation(root, Some(propagation.for_rootfs()))
        .map_err(sys("set rootfs propagation"))?;
    let applied = ctx.apply(&steps)?;
    if applied.dev_tmpfs {
        let nodes = devices::plan(lin.and_then(|l| l.devices().as_deref()).unwrap_or_default());
        devices::populate(&linux, root, &nodes, &fds.devices, opts.userns)?;
    }
    before_pivot();
    // The agent's own /proc/sys and /dev/null, opened while its root is
    // still reachable: a container's may be masked or fake.
    let proc_sys = (!sysctls.is_empty())
        .then(sysctl::open_proc_sys)
        .transpose()?;
    let dev_nulls = dev_nulls(&linux, masks::files_to_mask(&linux, root, &masked)?)?;

    nix::unistd::fchdir(root).map_err(sys("chdir rootfs"))?;
    rund_sys::process::pivot_here().map_err(sys("pivot_root"))?;
    let root = linux
        .open_path(Path::new("/"))
        .map_err(sys("open the new root"))?;
    let root = root.as_fd();
    if let Some(how) = propagation.after_pivot() {
        linux
            .set_propagation(root, how)
            .map_err(sys("set root propagation"))?;
    }
    for m in &applied.read_only_later {
        linux
            .set_attr(m.as_fd(), MOUNT_ATTR_RDONLY, 0, false)
            .map_err(sys("make a tmpfs read-only"))?;
    }
    if spec
        .root()
        .as_ref()
        .is_some_and(|r| r.readonly().unwrap_or(false))
    {
        linux
            .set_attr(root, MOUNT_ATTR_RDONLY, 0, false)
            .map_err(sys("make rootfs read-only"))?;
    }
    if let Some(fd) = &proc_sys {
        sysctl::write_sysctls(fd.as_fd(), &sysctls, &sysctl_ns)?;
    }
    masks::readonly(&linux, root, &readonly)?;
    masks::masked(&linux, root, dev_nulls, &masked)?;
    Ok(())
}

/// `n` detached clones of the agent's /dev/null (checked to be a character
/// device) to mask files with: a mount can only be cloned from the caller's
/// namespace, and the agent's root is gone after pivot_root.
fn dev_nulls(linux: &Linux, n: usize) -> Result<Vec<OwnedFd>, RootfsError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let fd = linux
        .open_path(Path::new("/dev/null"))
        .map_err(sys("open the agent's /dev/null"))?;
    match linux.stat(fd.as_fd()) {
        Ok((SFlag::S_IFCHR, _)) => {}
        Ok(_) => {
            return Err(RootfsError::Sys {
                op: "the agent's /dev/null is not a character device".into(),
                errno: nix::errno::Errno::EINVAL,
            })
        }
        Err(e) => return Err(sys("stat the agent's /dev/null")(e)),
    }
    (0..n)
        .map(|_| {
            linux
                .clone_tree(fd.as_fd(), false)
                .map_err(sys("open_tree the agent's /dev/null"))
        })
        .collect()
}
