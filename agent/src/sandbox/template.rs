//! The node's agent-root template: one mount namespace, made on first use
//! and pinned by an nsfs bind at a path every shim of the node is given
//! (`[sandbox] root_template`). Its root is a read-only tmpfs with what an
//! agent's root holds (/proc, /sys and the attach dir, a few /dev nodes).
//!
//! A launch enters it just before its unshare, so its new mount namespace
//! copies those few mounts instead of the host's whole table (hundreds on
//! a busy node, copied and then detached again under the kernel's global
//! mount locks), and the agent needs no pivot_root, whose walk of every
//! thread on the node holds the lock that every fork and exit waits for.
//! Agents without a user namespace only: the others' copy would be locked
//! to them, and the kernel lets them mount /proc only next to a fully
//! visible one.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::unistd::{fork, ForkResult};

use super::root::{self, e, io, RootError};

/// Enters the template pinned at `pin`, making it first if there is none.
/// Call from a single-threaded process (it may fork, and setns into a mount
/// namespace needs an unshared fs_struct).
pub fn enter(pin: &Path) -> Result<(), RootError> {
    let ns = match open_pinned(pin) {
        Some(ns) => ns,
        None => make(pin)?,
    };
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNS).map_err(e("enter the agent-root template"))
}

/// The pinned namespace, if `pin` is one: an empty file left by a crash or
/// a reboot (where /run is a disk) is not.
fn open_pinned(pin: &Path) -> Option<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(pin)
        .ok()?;
    rund_sys::ns::is_kind(file.as_fd(), "mnt").then(|| file.into())
}

/// Builds the template and pins it, under a lock so concurrent first
/// launches make one.
fn make(pin: &Path) -> Result<OwnedFd, RootError> {
    let dir = pin.parent().ok_or(RootError {
        op: format!("{}: no parent dir", pin.display()),
        errno: Errno::EINVAL,
    })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(io(format!("mkdir {}", dir.display())))?;
    // What is pinned here, every agent of the node runs in a copy of.
    let meta = std::fs::metadata(dir).map_err(io(format!("stat {}", dir.display())))?;
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(RootError {
            op: format!(
                "{} must be root's and writable by root only (owner {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
            errno: Errno::EPERM,
        });
    }
    let lock_path = dir.join(format!(
        "{}.lock",
        pin.file_name().unwrap_or_default().to_string_lossy()
    ));
    let lock = root_file(&lock_path)?;
    // SAFETY: flock on an fd we own; released when it is closed.
    Errno::result(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) })
        .map_err(e(format!("lock {}", lock_path.display())))?;
    if let Some(ns) = open_pinned(pin) {
        return Ok(ns);
    }
    // A stale pin: a mount of something else, or a plain file.
    let _ = umount2(pin, MntFlags::MNT_DETACH);
    root_file(pin)?;
    build_and_pin(pin)?;
    open_pinned(pin).ok_or(RootError {
        op: format!(
            "{} is not a mount namespace after pinning it",
            pin.display()
        ),
        errno: Errno::EIO,
    })
}

/// Opens `path`, made root's and private if missing; never through a symlink.
fn root_file(path: &Path) -> Result<std::fs::File, RootError> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io(format!("open {}", path.display())))
}

/// A child builds the tree in a new mount namespace and waits; the parent
/// binds that namespace onto `pin`, then lets the child go.
fn build_and_pin(pin: &Path) -> Result<(), RootError> {
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(e("pipe"))?;
    let (done_r, done_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(e("pipe"))?;
    // SAFETY: the caller is single-threaded (the launcher); the child only
    // makes system calls and exits with _exit.
    match unsafe { fork() }.map_err(e("fork the template's builder"))? {
        ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            let status: u8 = match build() {
                Ok(()) => 0,
                Err(err) => {
                    crate::warn!("agent-root template: {err}");
                    1
                }
            };
            let _ = std::fs::File::from(ready_w).write_all(&[status]);
            // Until the parent has pinned the namespace (or given up).
            let _ = std::fs::File::from(done_r).read(&mut [0u8; 1]);
            // SAFETY: _exit ends this forked child without running the parent's atexit work.
            unsafe { libc::_exit(i32::from(status)) }
        }
        ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let mut status = [1u8; 1];
            let built =
                std::fs::File::from(ready_r).read_exact(&mut status).is_ok() && status[0] == 0;
            let pinned = if built {
                let ns = format!("/proc/{child}/ns/mnt");
                mount(
                    Some(ns.as_str()),
                    pin,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(e(format!("bind {ns} onto {}", pin.display())))
            } else {
                Err(RootError {
                    op: "build the agent-root template (its error is in the log above)".into(),
                    errno: Errno::EIO,
                })
            };
            drop(done_w);
            let _ = nix::sys::wait::waitpid(child, None);
            pinned
        }
    }
}

/// In the forked builder: the tree, pivoted into, and its tmpfs made
/// read-only (every agent's root is a mount of this one superblock).
fn build() -> Result<(), RootError> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(e("unshare mount namespace"))?;
    let staging = root::build_tree()?;
    root::enter(staging)?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(e("remount the template's root read-only"))
}
