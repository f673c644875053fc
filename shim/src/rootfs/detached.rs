//! Detached mount trees: `open_tree(OPEN_TREE_CLONE)` gives an fd for a copy
//! of a mount that can be attached in another mount namespace with
//! `move_mount`, so the agent never needs to see host paths.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::RootfsError;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Clones the mount at `path` (recursively when `recursive`) into a
/// detached tree. A file path is fine too (single-file bind mounts).
pub fn open_tree_clone(path: &Path, recursive: bool) -> Result<OwnedFd, RootfsError> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        RootfsError::OpenTree {
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        }
    })?;
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: open_tree reads a NUL-terminated path and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(RootfsError::OpenTree {
            path: path.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: the kernel returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `struct mount_attr` (include/uapi/linux/mount.h, MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `mount_setattr(tree, "", AT_EMPTY_PATH [| AT_RECURSIVE], attr)` on a
/// detached tree.
pub fn mount_setattr(
    tree: BorrowedFd<'_>,
    recursive: bool,
    attr: &MountAttr,
) -> std::io::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: mount_setattr reads a NUL-terminated path ("") and `size` bytes
    // of `attr`, both valid for the call; it touches no other memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A read-only detached copy of one file's mount, to exec from: the
/// running binary cannot be opened for writing through /proc/<pid>/exe.
pub fn readonly_file(path: &Path) -> Result<OwnedFd, RootfsError> {
    let tree = open_tree_clone(path, false)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr(tree.as_fd(), false, &attr).map_err(|source| RootfsError::OpenTree {
        path: path.display().to_string(),
        source,
    })?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_a_directory_or_reports_why_not() {
        let dir = tempfile::tempdir().unwrap();
        match open_tree_clone(dir.path(), true) {
            Ok(_) => {}
            Err(RootfsError::OpenTree { source, .. })
                if source.raw_os_error() == Some(libc::EPERM) =>
            {
                rund_skip::skip("open_tree needs CAP_SYS_ADMIN");
            }
            Err(e) => panic!("{e}"),
        }
        let e = open_tree_clone(Path::new("/nonexistent/rund"), false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/rund"));
    }
}
