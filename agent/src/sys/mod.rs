//! The syscall seam: container set-up talks to the kernel through [`Syscall`]
//! so the planning logic can be unit-tested with a recorder.

#[cfg(test)]
pub mod fake;
pub mod raw;

use std::os::fd::BorrowedFd;
use std::path::Path;

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag};

/// Mount-namespace operations used while building a container's rootfs.
pub trait Syscall {
    fn mount(
        &self,
        src: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno>;
    fn move_mount(&self, from: BorrowedFd<'_>, target: &Path) -> Result<(), Errno>;
    fn mount_setattr(
        &self,
        target: &Path,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno>;
    fn mkdir_all(&self, path: &Path) -> Result<(), Errno>;
    /// Creates an empty regular file (and its parents) if nothing exists there.
    fn touch(&self, path: &Path) -> Result<(), Errno>;
    fn mknod(&self, path: &Path, kind: SFlag, mode: u32, dev: u64) -> Result<(), Errno>;
    fn chown(&self, path: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno>;
    fn symlink(&self, target: &str, link: &Path) -> Result<(), Errno>;
    fn exists(&self, path: &Path) -> bool;
    fn fd_is_dir(&self, fd: BorrowedFd<'_>) -> bool;
}

/// The real kernel.
pub struct Linux;

impl Syscall for Linux {
    fn mount(
        &self,
        src: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        nix::mount::mount(src, target, fstype, flags, data)
    }
    fn move_mount(&self, from: BorrowedFd<'_>, target: &Path) -> Result<(), Errno> {
        raw::move_mount_fd(from, target)
    }
    fn mount_setattr(
        &self,
        target: &Path,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno> {
        raw::mount_setattr(target, set, clr, recursive)
    }
    fn mkdir_all(&self, path: &Path) -> Result<(), Errno> {
        std::fs::create_dir_all(path).map_err(io_errno)
    }
    fn touch(&self, path: &Path) -> Result<(), Errno> {
        if path.symlink_metadata().is_ok() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            self.mkdir_all(parent)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map(drop)
            .map_err(io_errno)
    }
    fn mknod(&self, path: &Path, kind: SFlag, mode: u32, dev: u64) -> Result<(), Errno> {
        if let Some(parent) = path.parent() {
            self.mkdir_all(parent)?;
        }
        nix::sys::stat::mknod(path, kind, Mode::from_bits_truncate(mode), dev)
    }
    fn chown(&self, path: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        nix::unistd::chown(
            path,
            uid.map(nix::unistd::Uid::from_raw),
            gid.map(nix::unistd::Gid::from_raw),
        )
    }
    fn symlink(&self, target: &str, link: &Path) -> Result<(), Errno> {
        match std::os::unix::fs::symlink(target, link) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            r => r.map_err(io_errno),
        }
    }
    fn exists(&self, path: &Path) -> bool {
        path.symlink_metadata().is_ok()
    }
    fn fd_is_dir(&self, fd: BorrowedFd<'_>) -> bool {
        nix::sys::stat::fstat(fd)
            .map(|st| {
                SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
            })
            .unwrap_or(false)
    }
}

pub fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
