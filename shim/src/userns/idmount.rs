//! Idmapped mounts: a detached clone of a mount (`open_tree`) whose ids are
//! shifted through a user namespace's map (`mount_setattr(MOUNT_ATTR_IDMAP)`),
//! then attached where wanted (`move_mount`). O(1): nothing is chowned.
//!
//! Through a mount idmapped with `0 <host_base> <size>`, a file owned by
//! host uid 0 on disk appears owned by `host_base` on the host, i.e. by 0
//! inside the container's user namespace; and container root writes files
//! owned by 0 on disk.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use rund_sys::mount::{mount_setattr, move_mount_to, MountAttr, MOUNT_ATTR_IDMAP};

use super::UsernsError;

/// A detached, idmapped copy of the mount at `path` (with its submounts
/// when `recursive`), ready for `attach` or to be passed to the agent.
pub fn idmapped_clone(
    path: &Path,
    recursive: bool,
    userns: BorrowedFd<'_>,
) -> Result<OwnedFd, UsernsError> {
    check_userns(path, userns)?;
    let tree = rund_sys::mount::clone_path(path, recursive)
        .map_err(|e| idmap_err(path, format!("open_tree: {e}")))?;
    set_idmap(tree.as_fd(), path, recursive, userns)?;
    Ok(tree)
}

/// Idmaps a detached tree (`tree` from open_tree(OPEN_TREE_CLONE));
/// `path` is only for error messages.
pub fn set_idmap(
    tree: BorrowedFd<'_>,
    path: &Path,
    recursive: bool,
    userns: BorrowedFd<'_>,
) -> Result<(), UsernsError> {
    check_userns(path, userns)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let Err(err) = mount_setattr(tree, recursive, &attr) else {
        return Ok(());
    };
    Err(match err {
        // The userns fd was checked above, so EINVAL is the filesystem.
        Errno::EINVAL => UsernsError::IdmapUnsupported {
            path: path.display().to_string(),
            fstype: fs_name(tree),
        },
        Errno::EPERM => idmap_err(
            path,
            "not permitted: it needs CAP_SYS_ADMIN over the user namespace, and no mount in the tree may \
             already be idmapped"
                .into(),
        ),
        Errno::ENOSYS => idmap_err(path, "the kernel has no mount_setattr (Linux 5.12 or later)".into()),
        _ => idmap_err(path, format!("mount_setattr: {}", std::io::Error::from(err))),
    })
}

/// Attaches a detached tree at `target` (in the caller's mount namespace).
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> Result<(), UsernsError> {
    move_mount_to(tree, target).map_err(|e| match e {
        Errno::EINVAL if target.as_os_str().as_encoded_bytes().contains(&0) => {
            idmap_err(target, "path contains a NUL byte".into())
        }
        e => idmap_err(target, format!("move_mount: {}", std::io::Error::from(e))),
    })
}

fn check_userns(path: &Path, userns: BorrowedFd<'_>) -> Result<(), UsernsError> {
    if !rund_sys::ns::is_kind(userns, "user") {
        return Err(idmap_err(
            path,
            format!("fd {} is not a user namespace", userns.as_raw_fd()),
        ));
    }
    Ok(())
}

fn idmap_err(path: &Path, reason: String) -> UsernsError {
    UsernsError::Idmap {
        path: path.display().to_string(),
        reason,
    }
}

/// The filesystem type of a mount, for error messages.
fn fs_name(fd: BorrowedFd<'_>) -> String {
    let Ok(st) = nix::sys::statfs::fstatfs(fd) else {
        return "unknown type".into();
    };
    let magic = st.filesystem_type().0 as u64;
    let name = match magic {
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x0102_1994 => "tmpfs",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x794c_7630 => "overlay",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x6367_7270 => "cgroup2",
        0x0027_e0eb => "cgroup",
        0x1cd1 => "devpts",
        0x6462_6720 => "debugfs",
        0x7363_6673 => "securityfs",
        0x8584_58f6 => "ramfs",
        _ => return format!("type {magic:#x}"),
    };
    name.into()
}

/// The first of `paths` (with "recursive") that the kernel refuses to
/// idmap, as the error the real mount would give; other failures are left
/// for the real mount to report.
pub fn first_unsupported(
    paths: &[(std::path::PathBuf, bool)],
    userns: BorrowedFd<'_>,
) -> Option<UsernsError> {
    paths.iter().find_map(
        |(p, recursive)| match idmapped_clone(p, *recursive, userns) {
            Err(e @ UsernsError::IdmapUnsupported { .. }) => Some(e),
            _ => None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_user_namespace_idmaps() {
        let tree = std::fs::File::open("/").unwrap();
        let path = Path::new("/x");
        for not_userns in ["/proc/self/ns/net", "/dev/null"] {
            let f = std::fs::File::open(not_userns).unwrap();
            let err = set_idmap(tree.as_fd(), path, false, f.as_fd()).unwrap_err();
            assert!(
                err.to_string().contains("is not a user namespace"),
                "{not_userns}: {err}"
            );
        }
        // A user namespace passes the check (the idmap itself needs a detached tree).
        let user = std::fs::File::open("/proc/self/ns/user").unwrap();
        assert!(check_userns(path, user.as_fd()).is_ok());
    }
}
