//! Detached mount trees: `open_tree(OPEN_TREE_CLONE)` gives an fd for a copy
//! of a mount that can be attached in another mount namespace with
//! `move_mount`, so the agent never needs to see host paths.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rund_sys::mount::{self, MountAttr, MOUNT_ATTR_RDONLY};

use super::RootfsError;

fn open_tree_err(path: &Path) -> impl FnOnce(nix::errno::Errno) -> RootfsError + '_ {
    move |errno| RootfsError::OpenTree {
        path: path.display().to_string(),
        source: errno.into(),
    }
}

/// Clones the mount at `path` (recursively when `recursive`) into a
/// detached tree. A file path is fine too (single-file bind mounts).
pub fn open_tree_clone(path: &Path, recursive: bool) -> Result<OwnedFd, RootfsError> {
    mount::clone_path(path, recursive).map_err(open_tree_err(path))
}

/// A read-only detached copy of one file's mount, to exec from: the
/// running binary cannot be opened for writing through /proc/<pid>/exe.
pub fn readonly_file(path: &Path) -> Result<OwnedFd, RootfsError> {
    let tree = open_tree_clone(path, false)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        ..MountAttr::default()
    };
    mount::mount_setattr(tree.as_fd(), false, &attr).map_err(open_tree_err(path))?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path() {
        let e = open_tree_clone(Path::new("/nonexistent/rund"), false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/rund"), "{e}");
    }
}
