//! The agent's private root filesystem.

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};

use crate::container::rootfs::ATTACH_DIR;

#[derive(Debug, thiserror::Error)]
#[error("agent root set-up: {op}: {errno}")]
pub struct RootError {
    op: String,
    errno: Errno,
}

fn e(op: impl Into<String>) -> impl FnOnce(Errno) -> RootError {
    let op = op.into();
    move |errno| RootError { op, errno }
}

/// Device nodes bound from the host's /dev (mknod is not allowed in a user namespace).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Where the new root is built before pivot_root: any existing dir; the
/// tmpfs only hides it in the agent's own mount namespace.
const STAGING: [&str; 4] = ["/tmp", "/mnt", "/run", "/var"];

pub fn setup() -> Result<(), RootError> {
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
    let dir = |p: &str| -> Result<(), RootError> {
        std::fs::create_dir_all(staging.join(p)).map_err(|err| RootError {
            op: format!("mkdir {p}"),
            errno: crate::sys::io_errno(err),
        })
    };
    for d in ["proc", "dev", "sys", ATTACH_DIR.trim_start_matches('/')] {
        dir(d)?;
    }
    for d in DEVICES {
        let target = staging.join("dev").join(d);
        std::fs::File::create(&target).map_err(|err| RootError {
            op: format!("create /dev/{d}"),
            errno: crate::sys::io_errno(err),
        })?;
        let src = format!("/dev/{d}");
        if let Err(errno) = mount(Some(src.as_str()), &target, nf, MsFlags::MS_BIND, nf) {
            // /dev/tty is missing when nothing has a terminal: not fatal.
            crate::debug!("bind {src}: {errno}");
            let _ = std::fs::remove_file(&target);
        }
    }
    // Mounted while the host's /proc and /sys are still visible: in a user
    // namespace the kernel only allows fresh ones next to fully visible ones.
    let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), &staging.join("proc"), Some("proc"), hard, nf).map_err(e("mount /proc"))?;
    // Kept so containers may mount sysfs in a user namespace; optional.
    if let Err(errno) = mount(Some("sysfs"), &staging.join("sys"), Some("sysfs"), hard, nf) {
        crate::debug!("no sysfs for the agent: {errno}");
    }
    std::env::set_current_dir(staging).map_err(|err| RootError {
        op: "chdir new root".into(),
        errno: crate::sys::io_errno(err),
    })?;
    rund_sys::process::pivot_here().map_err(e("pivot_root"))?;
    Ok(())
}
