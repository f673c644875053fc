//! `linux.readonlyPaths` and `linux.maskedPaths`, applied after pivot_root
//! (as runc does), each onto an fd resolved beneath the container's root.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::stat::SFlag;

use super::paths::Create;
use crate::sys::Syscall;
use rund_sys::mount::MOUNT_ATTR_RDONLY;

#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {op}: {errno}")]
pub struct MaskError {
    what: &'static str,
    path: String,
    op: &'static str,
    errno: Errno,
}

fn fail<'a>(
    what: &'static str,
    path: &'a str,
    op: &'static str,
) -> impl FnOnce(Errno) -> MaskError + 'a {
    move |errno| MaskError {
        what,
        path: path.to_string(),
        op,
        errno,
    }
}

/// Makes each path a read-only bind of itself (the top mount; submounts
/// keep their flags, as in runc). Missing paths are skipped.
pub fn readonly(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
    paths: &[String],
) -> Result<(), MaskError> {
    for p in paths {
        let e = |op| fail("readonly path", p, op);
        let target = match sys.resolve(root, Path::new(p), Create::No) {
            Err(Errno::ENOENT) => continue,
            r => r.map_err(e("resolve in the container"))?,
        };
        let clone = sys
            .clone_tree(target.as_fd(), true)
            .map_err(e("open_tree"))?;
        sys.set_attr(clone.as_fd(), MOUNT_ATTR_RDONLY, 0, false)
            .map_err(e("mount_setattr"))?;
        sys.move_mount(clone.as_fd(), target.as_fd())
            .map_err(e("move_mount"))?;
    }
    Ok(())
}

/// The distinct masked paths that exist, each resolved beneath the root
/// with its type; missing paths are skipped.
fn targets<'p>(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
    paths: &'p [String],
) -> Result<Vec<(&'p str, OwnedFd, SFlag)>, MaskError> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for p in paths {
        let e = |op| fail("masked path", p, op);
        let target = match sys.resolve(root, Path::new(p), Create::No) {
            Err(Errno::ENOENT) => continue,
            r => r.map_err(e("resolve in the container"))?,
        };
        let (kind, _) = sys.stat(target.as_fd()).map_err(e("stat"))?;
        if seen.insert(super::paths::clean(Path::new(p))) {
            out.push((p.as_str(), target, kind));
        }
    }
    Ok(out)
}

/// How many clones of /dev/null [`masked`] will use: its existing,
/// distinct paths that are not directories. Counted before pivot_root
/// (the same tree then), because closing an unused clone dissolves a mount
/// and waits for an RCU grace period on the start path.
pub fn files_to_mask(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
    paths: &[String],
) -> Result<usize, MaskError> {
    Ok(targets(sys, root, paths)?
        .iter()
        .filter(|(_, _, kind)| *kind != SFlag::S_IFDIR)
        .count())
}

/// Masks each path: an empty read-only tmpfs over a directory, one of
/// `dev_nulls` (detached clones of the agent's own /dev/null, made before
/// pivot_root, one per file: [`files_to_mask`]) over anything else.
/// Missing paths are skipped.
pub fn masked(
    sys: &dyn Syscall,
    root: BorrowedFd<'_>,
    mut dev_nulls: Vec<OwnedFd>,
    paths: &[String],
) -> Result<(), MaskError> {
    for (p, target, kind) in targets(sys, root, paths)? {
        let e = |op| fail("masked path", p, op);
        let mnt = if kind == SFlag::S_IFDIR {
            // runc's size: one block, one inode (some kernels want two).
            match sys.fs_mount(
                "tmpfs",
                "tmpfs",
                MsFlags::MS_RDONLY,
                Some("nr_blocks=1,nr_inodes=1"),
            ) {
                Err(Errno::EINVAL) => sys.fs_mount(
                    "tmpfs",
                    "tmpfs",
                    MsFlags::MS_RDONLY,
                    Some("nr_blocks=1,nr_inodes=2"),
                ),
                r => r,
            }
            .map_err(e("mount tmpfs"))?
        } else {
            dev_nulls
                .pop()
                .ok_or(Errno::ENOENT)
                .map_err(e("a clone of /dev/null"))?
        };
        sys.move_mount(mnt.as_fd(), target.as_fd())
            .map_err(e("move_mount"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::Recorder;

    #[test]
    fn readonly_binds_the_path_onto_itself_top_only() {
        let rec = Recorder::default();
        let root = rec.dir("/");
        rec.seed_dir("/proc/sys");
        readonly(
            &rec,
            root.as_fd(),
            &["/proc/sys".into(), "/proc/missing".into()],
        )
        .unwrap();
        assert_eq!(
            rec.calls(),
            [
                "clone /proc/sys rec=true",
                "setattr clone:/proc/sys set=0x1 clr=0x0 rec=false",
                "move_mount clone:/proc/sys /proc/sys",
            ]
        );
    }

    #[test]
    fn masks_dirs_with_tmpfs_and_files_with_dev_null_once_each() {
        let rec = Recorder::default();
        let root = rec.dir("/");
        rec.seed_dir("/proc/acpi");
        rec.paths.borrow_mut().insert("/proc/kcore".into());
        let nulls = (0..4).map(|_| rec.fd("clone:/dev/null")).collect();
        let paths = ["/proc/acpi", "/proc/kcore", "/proc/../proc/kcore", "/nope"].map(String::from);
        assert_eq!(
            files_to_mask(&rec, root.as_fd(), &paths).unwrap(),
            1,
            "kcore once; acpi is a directory, /nope is missing"
        );
        masked(&rec, root.as_fd(), nulls, &paths).unwrap();
        assert_eq!(
            rec.calls(),
            [
                "fsmount tmpfs tmpfs 0x1 nr_blocks=1,nr_inodes=1",
                "move_mount tmpfs /proc/acpi",
                "move_mount clone:/dev/null /proc/kcore",
            ]
        );
    }
}
