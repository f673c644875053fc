//! Detached mount trees: `open_tree(OPEN_TREE_CLONE)` gives an fd for a copy
//! of a mount that can be attached in another mount namespace with
//! `move_mount`, so the agent never needs to see host paths.

use std::os::fd::{FromRawFd, OwnedFd};
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
