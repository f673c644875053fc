//! The agent's private root filesystem: built per agent (and pivoted into),
//! or copied from the node's template (`template`), where only the agent's
//! own /proc and /sys are left to mount.

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};

use crate::container::rootfs::ATTACH_DIR;

#[derive(Debug, thiserror::Error)]
#[error("agent root set-up: {op}: {errno}")]
pub struct RootError {
    pub(super) op: String,
    pub(super) errno: Errno,
}

pub(super) fn e(op: impl Into<String>) -> impl FnOnce(Errno) -> RootError {
    let op = op.into();
    move |errno| RootError { op, errno }
}

pub(super) fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> RootError {
    let op = op.into();
    move |err| RootError {
        op,
        errno: crate::sys::io_errno(err),
    }
}

/// Device nodes bound from the host's /dev (mknod is not allowed in a user namespace).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Where the new root is built before pivot_root: any existing dir; the
/// tmpfs only hides it in the agent's own mount namespace.
const STAGING: [&str; 4] = ["/tmp", "/mnt", "/run", "/var"];

const HARD: MsFlags = MsFlags::MS_NOSUID
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);

/// The agent's root in a mount namespace of its own. `templated`: the
/// namespace is a copy of the node's template, which has the tree already.
pub fn setup(templated: bool) -> Result<(), RootError> {
    if templated {
        return mount_kernel_fs(Path::new("/"));
    }
    let staging = build_tree()?;
    // Mounted while the host's /proc and /sys are still visible: in a user
    // namespace the kernel only allows fresh ones next to fully visible ones.
    mount_kernel_fs(staging)?;
    enter(staging)
}

/// Makes the mount namespace private and builds the root's tree on a fresh
/// tmpfs: the dirs, and the device nodes bound from the host. Returns where.
pub(super) fn build_tree() -> Result<&'static Path, RootError> {
    let nf = None::<&str>;
    mount(nf, "/", nf, MsFlags::MS_REC | MsFlags::MS_PRIVATE, nf).map_err(e("make / rprivate"))?;
    let staging = STAGING
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .ok_or(RootError {
            op: "find a staging dir".into(),
            errno: Errno::ENOENT,
        })?;
    mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=755,size=1m"),
    )
    .map_err(e("mount tmpfs root"))?;
    for d in ["proc", "dev", "sys", ATTACH_DIR.trim_start_matches('/')] {
        std::fs::create_dir_all(staging.join(d)).map_err(io(format!("mkdir {d}")))?;
    }
    for d in DEVICES {
        let target = staging.join("dev").join(d);
        std::fs::File::create(&target).map_err(io(format!("create /dev/{d}")))?;
        let src = format!("/dev/{d}");
        if let Err(errno) = mount(Some(src.as_str()), &target, nf, MsFlags::MS_BIND, nf) {
            // /dev/tty is missing when nothing has a terminal: not fatal.
            crate::debug!("bind {src}: {errno}");
            let _ = std::fs::remove_file(&target);
        }
    }
    Ok(staging)
}

/// pivot_root into `staging`: no host mount stays reachable.
pub(super) fn enter(staging: &Path) -> Result<(), RootError> {
    std::env::set_current_dir(staging).map_err(io("chdir new root"))?;
    rund_sys::process::pivot_here().map_err(e("pivot_root"))
}

/// The agent's own /proc (its pid namespace) and /sys (its network's).
fn mount_kernel_fs(root: &Path) -> Result<(), RootError> {
    let nf = None::<&str>;
    mount(Some("proc"), &root.join("proc"), Some("proc"), HARD, nf).map_err(e("mount /proc"))?;
    // Kept so containers may mount sysfs in a user namespace; optional.
    if let Err(errno) = mount(Some("sysfs"), &root.join("sys"), Some("sysfs"), HARD, nf) {
        crate::debug!("no sysfs for the agent: {errno}");
    }
    Ok(())
}
