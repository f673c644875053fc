//! The syscall seam: container set-up talks to the kernel through [`Syscall`]
//! so the planning logic can be unit-tested with a recorder. Everything
//! that touches the container's tree takes fds: a path inside the rootfs is
//! resolved once, beneath the root fd, and never again as a string.

#[cfg(test)]
pub mod fake;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag};

use crate::container::paths::{self, Create};
use rund_sys::mount as mountapi;

/// Mount-namespace operations used while building a container's rootfs.
pub trait Syscall {
    /// Opens (O_PATH) `path` inside the tree rooted at `root`: symlinks and
    /// ".." cannot leave it. Missing parts are created as `create` says.
    fn resolve(&self, root: BorrowedFd<'_>, path: &Path, create: Create) -> Result<OwnedFd, Errno>;
    /// Opens (O_PATH) an absolute path of the agent's own root (never a
    /// container path), e.g. its /dev/null.
    fn open_path(&self, path: &Path) -> Result<OwnedFd, Errno>;
    /// Attaches the mount `from` on top of what `to` refers to.
    fn move_mount(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno>;
    /// A new filesystem as a detached mount, with mount(2)'s flags and data.
    fn fs_mount(
        &self,
        fstype: &str,
        source: &str,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<OwnedFd, Errno>;
    /// A detached copy of the mount (tree, when `recursive`) at `fd`.
    fn clone_tree(&self, fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Errno>;
    /// Sets and clears MOUNT_ATTR_* bits on the mount at `mnt` (and below it when `recursive`).
    fn set_attr(
        &self,
        mnt: BorrowedFd<'_>,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno>;
    /// Changes the propagation type of the mount at `mnt`: one of MS_SHARED,
    /// MS_SLAVE, MS_PRIVATE, MS_UNBINDABLE, with MS_REC for the whole tree.
    fn set_propagation(&self, mnt: BorrowedFd<'_>, how: MsFlags) -> Result<(), Errno>;
    /// File type and permission bits of `fd`.
    fn stat(&self, fd: BorrowedFd<'_>) -> Result<(SFlag, u32), Errno>;
    /// Whether two fds refer to the same file.
    fn same_file(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, Errno>;
    fn mknodat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        kind: SFlag,
        mode: u32,
        dev: u64,
    ) -> Result<(), Errno>;
    fn chownat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), Errno>;
    /// Creates the symlink `dir/name -> target`; an existing name is left alone.
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> Result<(), Errno>;
}

/// The real kernel.
pub struct Linux;

impl Syscall for Linux {
    fn resolve(&self, root: BorrowedFd<'_>, path: &Path, create: Create) -> Result<OwnedFd, Errno> {
        paths::open_in_root(root, path, create)
    }
    fn open_path(&self, path: &Path) -> Result<OwnedFd, Errno> {
        nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
    }
    fn move_mount(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
        mountapi::move_mount_onto(from, to)
    }
    fn fs_mount(
        &self,
        fstype: &str,
        source: &str,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<OwnedFd, Errno> {
        mountapi::fs_mount(fstype, source, flags, data, mountapi::attrs_of(flags))
    }
    fn clone_tree(&self, fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Errno> {
        mountapi::clone_tree(fd, recursive)
    }
    fn set_attr(
        &self,
        mnt: BorrowedFd<'_>,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno> {
        mountapi::setattr_fd(mnt, set, clr, MsFlags::empty(), recursive)
    }
    fn set_propagation(&self, mnt: BorrowedFd<'_>, how: MsFlags) -> Result<(), Errno> {
        let rec = how.contains(MsFlags::MS_REC);
        mountapi::setattr_fd(mnt, 0, 0, how - MsFlags::MS_REC, rec)
    }
    fn stat(&self, fd: BorrowedFd<'_>) -> Result<(SFlag, u32), Errno> {
        let st = nix::sys::stat::fstat(fd)?;
        Ok((
            SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()),
            st.st_mode & 0o7777,
        ))
    }
    fn same_file(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, Errno> {
        let (x, y) = (nix::sys::stat::fstat(a)?, nix::sys::stat::fstat(b)?);
        Ok(x.st_dev == y.st_dev && x.st_ino == y.st_ino)
    }
    fn mknodat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        kind: SFlag,
        mode: u32,
        dev: u64,
    ) -> Result<(), Errno> {
        nix::sys::stat::mknodat(dir, name, kind, Mode::from_bits_truncate(mode), dev)
    }
    fn chownat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), Errno> {
        nix::unistd::fchownat(
            dir,
            name,
            uid.map(nix::unistd::Uid::from_raw),
            gid.map(nix::unistd::Gid::from_raw),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
    }
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
        match nix::unistd::symlinkat(target, dir, name) {
            Err(Errno::EEXIST) => Ok(()),
            r => r,
        }
    }
}

pub fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
