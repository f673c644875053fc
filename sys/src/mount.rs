//! The fd-based mount API (Linux ≥ 5.12) and openat2 (≥ 5.6): a mount made
//! on an fd is never re-resolved through a symlink a container planted.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::MsFlags;

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
/// The atime field's value for relatime (the default).
pub const MOUNT_ATTR_RELATIME: u64 = 0x0;
/// The atime bits: setting one of the atime modes must clear the others.
pub const MOUNT_ATTR_ATIME: u64 = 0x70;
pub const MOUNT_ATTR_IDMAP: u64 = 0x10_0000;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x20_0000;

pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

const OPEN_TREE_CLONE: u32 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const FSOPEN_CLOEXEC: u32 = 0x1;
const FSMOUNT_CLOEXEC: u32 = 0x1;
const FSCONFIG_SET_FLAG: u32 = 0;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;

/// `struct mount_attr` (include/uapi/linux/mount.h, MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

fn cstr(s: &str) -> Result<CString, Errno> {
    CString::new(s).map_err(|_| Errno::EINVAL)
}

fn cpath(p: &Path) -> Result<CString, Errno> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)
}

fn fd_result(r: libc::c_long) -> Result<OwnedFd, Errno> {
    let fd = Errno::result(r)?;
    // SAFETY: the kernel returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// MOUNT_ATTR_* of the per-mount flags of mount(2).
pub fn attrs_of(flags: MsFlags) -> u64 {
    let mut a = 0;
    for (f, bit) in [
        (MsFlags::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (MsFlags::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (MsFlags::MS_NODEV, MOUNT_ATTR_NODEV),
        (MsFlags::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
        (MsFlags::MS_NODIRATIME, MOUNT_ATTR_NODIRATIME),
    ] {
        if flags.contains(f) {
            a |= bit;
        }
    }
    if flags.contains(MsFlags::MS_NOATIME) {
        a |= MOUNT_ATTR_NOATIME;
    } else if flags.contains(MsFlags::MS_STRICTATIME) {
        a |= MOUNT_ATTR_STRICTATIME;
    }
    a
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, path, {flags | O_CLOEXEC, mode, resolve})`.
pub fn openat2(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> Result<OwnedFd, Errno> {
    let c = cpath(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve,
    };
    loop {
        // SAFETY: `how` and `c` outlive the call; its size is passed along.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        // EAGAIN: a rename raced the RESOLVE_IN_ROOT walk; it is safe to retry.
        match fd_result(r) {
            Err(Errno::EAGAIN) => continue,
            other => return other,
        }
    }
}

/// `open_tree(dir, path, OPEN_TREE_CLONE | O_CLOEXEC | extra)`.
fn open_tree_clone(dir: RawFd, path: &CStr, extra: u32) -> Result<OwnedFd, Errno> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | extra;
    // SAFETY: `path` is NUL-terminated and outlives the call; the kernel
    // returns a new fd or -1.
    fd_result(unsafe { libc::syscall(libc::SYS_open_tree, dir, path.as_ptr(), flags) })
}

fn recursive_flag(recursive: bool) -> u32 {
    if recursive {
        libc::AT_RECURSIVE as u32
    } else {
        0
    }
}

/// A detached copy of the mount (tree, when `recursive`) at `fd`.
pub fn clone_tree(fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Errno> {
    let extra = libc::AT_EMPTY_PATH as u32 | recursive_flag(recursive);
    open_tree_clone(fd.as_raw_fd(), c"", extra)
}

/// A detached copy of the mount (tree, when `recursive`) at `path`, resolved
/// from the caller's cwd. A file path is fine too (single-file bind mounts).
pub fn clone_path(path: &Path, recursive: bool) -> Result<OwnedFd, Errno> {
    open_tree_clone(libc::AT_FDCWD, &cpath(path)?, recursive_flag(recursive))
}

fn move_mount(
    from: BorrowedFd<'_>,
    to_dir: RawFd,
    to_path: &CStr,
    to_flags: u32,
) -> Result<(), Errno> {
    // SAFETY: valid fds and NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to_dir,
            to_path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | to_flags,
        )
    };
    Errno::result(r).map(drop)
}

/// Attaches the mount `from` (detached or not) on top of what `to` refers to.
pub fn move_mount_onto(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
    move_mount(from, to.as_raw_fd(), c"", MOVE_MOUNT_T_EMPTY_PATH)
}

/// Attaches the mount `from` at `target`, resolved from the caller's cwd in
/// the caller's mount namespace.
pub fn move_mount_to(from: BorrowedFd<'_>, target: &Path) -> Result<(), Errno> {
    move_mount(from, libc::AT_FDCWD, &cpath(target)?, 0)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], attr)`: changes the
/// mount at `fd` (and below it when `recursive`).
pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, attr: &MountAttr) -> Result<(), Errno> {
    let flags = libc::AT_EMPTY_PATH as u32 | recursive_flag(recursive);
    // SAFETY: mount_setattr reads a NUL-terminated path ("") and `size` bytes
    // of `attr`, both valid for the call; it touches no other memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(r).map(drop)
}

/// [`mount_setattr`] with flags and, when `propagation` is not empty
/// (MS_SHARED, MS_SLAVE, MS_PRIVATE or MS_UNBINDABLE), the propagation type.
pub fn setattr_fd(
    fd: BorrowedFd<'_>,
    set: u64,
    clr: u64,
    propagation: MsFlags,
    recursive: bool,
) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: propagation.bits(),
        userns_fd: 0,
    };
    mount_setattr(fd, recursive, &attr)
}

fn fsconfig(fd: BorrowedFd<'_>, cmd: u32, key: &str, value: Option<&str>) -> Result<(), Errno> {
    let k = cstr(key)?;
    let v = value.map(cstr).transpose()?;
    let vp = v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
    let kp = if cmd == FSCONFIG_CMD_CREATE {
        std::ptr::null()
    } else {
        k.as_ptr()
    };
    // SAFETY: key and value are NUL-terminated strings (or NULL) that outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_fsconfig, fd.as_raw_fd(), cmd, kp, vp, 0) };
    Errno::result(r).map(drop)
}

/// Superblock flags of mount(2) that the new API takes as fsconfig flags.
const SB_FLAGS: [(MsFlags, &str); 4] = [
    (MsFlags::MS_SYNCHRONOUS, "sync"),
    (MsFlags::MS_DIRSYNC, "dirsync"),
    (MsFlags::MS_MANDLOCK, "mand"),
    (MsFlags::MS_LAZYTIME, "lazytime"),
];

/// A new `fstype` filesystem as a detached mount: fsopen, one fsconfig per
/// `data` option ("k=v" as a string, "k" as a flag), fsmount with the
/// per-mount attributes `attrs` (MOUNT_ATTR_*).
pub fn fs_mount(
    fstype: &str,
    source: &str,
    sb_flags: MsFlags,
    data: Option<&str>,
    attrs: u64,
) -> Result<OwnedFd, Errno> {
    let t = cstr(fstype)?;
    // SAFETY: a NUL-terminated fs type name.
    let fsfd = fd_result(unsafe { libc::syscall(libc::SYS_fsopen, t.as_ptr(), FSOPEN_CLOEXEC) })?;
    let fs = std::os::fd::AsFd::as_fd(&fsfd);
    fsconfig(fs, FSCONFIG_SET_STRING, "source", Some(source))?;
    for (flag, name) in SB_FLAGS {
        if sb_flags.contains(flag) {
            fsconfig(fs, FSCONFIG_SET_FLAG, name, None)?;
        }
    }
    for opt in data
        .unwrap_or_default()
        .split(',')
        .filter(|o| !o.is_empty())
    {
        match opt.split_once('=') {
            Some((k, v)) => fsconfig(fs, FSCONFIG_SET_STRING, k, Some(v))?,
            None => fsconfig(fs, FSCONFIG_SET_FLAG, opt, None)?,
        }
    }
    fsconfig(fs, FSCONFIG_CMD_CREATE, "", None)?;
    // SAFETY: plain integer arguments on an fd we own.
    let r = unsafe { libc::syscall(libc::SYS_fsmount, fsfd.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
    fd_result(r)
}

/// Whether an OCI mount is a bind mount: type "bind", or a "bind"/"rbind"
/// option. The shim passes exactly these to the agent as detached trees and
/// the agent attaches exactly these from fds, so both ask this one rule.
pub fn is_bind(typ: Option<&str>, options: &[String]) -> bool {
    typ == Some("bind") || options.iter().any(|o| o == "bind" || o == "rbind")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn openat2_in_root_keeps_symlinks_inside() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/passwd"), "inside").unwrap();
        std::os::unix::fs::symlink("/../../../../etc", d.path().join("up")).unwrap();
        let root = std::fs::File::open(d.path()).unwrap();
        let fd = openat2(
            root.as_fd(),
            Path::new("up/passwd"),
            libc::O_RDONLY,
            0,
            RESOLVE_IN_ROOT,
        )
        .unwrap();
        let text = std::fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert_eq!(text, "inside");
        let beneath = openat2(
            root.as_fd(),
            Path::new("up/passwd"),
            libc::O_RDONLY,
            0,
            RESOLVE_BENEATH,
        );
        assert_eq!(beneath.unwrap_err(), Errno::EXDEV);
    }

    #[test]
    fn clones_a_directory_or_reports_why_not() {
        let dir = tempfile::tempdir().unwrap();
        match clone_path(dir.path(), true) {
            Ok(_) => {}
            Err(Errno::EPERM) => rund_skip::skip("open_tree needs CAP_SYS_ADMIN"),
            Err(e) => panic!("{e}"),
        }
        assert_eq!(
            clone_path(Path::new("/nonexistent/rund"), false).unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(
            clone_path(Path::new("a\0b"), false).unwrap_err(),
            Errno::EINVAL
        );
    }

    #[test]
    fn mount_attr_is_the_kernels_size_ver0() {
        assert_eq!(std::mem::size_of::<MountAttr>(), 32);
    }

    #[test]
    fn bind_is_the_type_or_an_option() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_bind(Some("bind"), &[]));
        assert!(is_bind(None, &o(&["rbind", "ro"])));
        assert!(is_bind(Some("none"), &o(&["bind"])));
        assert!(!is_bind(Some("tmpfs"), &o(&["nosuid", "mode=755"])));
        assert!(!is_bind(None, &[]));
    }

    #[test]
    fn atime_modes_map_to_one_attribute() {
        assert_eq!(
            attrs_of(MsFlags::MS_RDONLY | MsFlags::MS_NOATIME | MsFlags::MS_STRICTATIME),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOATIME
        );
        assert_eq!(attrs_of(MsFlags::MS_BIND), 0);
    }
}
