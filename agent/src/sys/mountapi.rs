//! The fd-based mount API (Linux ≥ 5.12) and openat2 (≥ 5.6): every mount
//! a container gets is made on an fd, never on a path string that could be
//! re-resolved through a symlink the container planted.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::MsFlags;

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

/// A detached copy of the mount (tree, when `recursive`) at `fd`.
pub fn clone_tree(fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Errno> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH names `fd` itself.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    fd_result(r)
}

/// Attaches the mount `from` (detached or not) on top of what `to` refers to.
pub fn move_mount_onto(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: valid fds and empty NUL-terminated paths (both *_EMPTY_PATH).
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    Errno::result(r).map(drop)
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], ...)`: flags and,
/// when `propagation` is not empty (MS_SHARED, MS_SLAVE, MS_PRIVATE or
/// MS_UNBINDABLE), the propagation type of the mount at `fd`.
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
    let mut flags = libc::AT_EMPTY_PATH;
    if recursive {
        flags |= libc::AT_RECURSIVE;
    }
    // SAFETY: attr lives across the call and its size is passed along.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(r).map(drop)
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
}
