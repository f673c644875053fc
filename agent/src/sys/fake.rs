//! A recorder standing in for the kernel in unit tests.

use std::cell::RefCell;
use std::collections::HashSet;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::stat::SFlag;

use super::Syscall;

#[derive(Default)]
pub struct Recorder {
    pub calls: RefCell<Vec<String>>,
    /// Paths that "exist" (created by the recorded calls or seeded).
    pub paths: RefCell<HashSet<PathBuf>>,
    /// Raw fds that "are directories".
    pub dir_fds: HashSet<i32>,
    /// fstypes whose mount fails with EPERM.
    pub refuse: HashSet<String>,
}

impl Recorder {
    fn log(&self, s: String) {
        self.calls.borrow_mut().push(s);
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl Syscall for Recorder {
    fn mount(
        &self,
        src: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<(), Errno> {
        if fstype.is_some_and(|t| self.refuse.contains(t)) {
            return Err(Errno::EPERM);
        }
        self.log(format!(
            "mount {} {} {} {:#x} {}",
            src.unwrap_or("-"),
            target.display(),
            fstype.unwrap_or("-"),
            flags.bits(),
            data.unwrap_or("")
        ));
        Ok(())
    }
    fn move_mount(&self, from: BorrowedFd<'_>, target: &Path) -> Result<(), Errno> {
        self.log(format!(
            "move_mount fd{} {}",
            from.as_raw_fd(),
            target.display()
        ));
        Ok(())
    }
    fn mount_setattr(
        &self,
        target: &Path,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno> {
        self.log(format!(
            "setattr {} set={set:#x} clr={clr:#x} rec={recursive}",
            target.display()
        ));
        Ok(())
    }
    fn mkdir_all(&self, path: &Path) -> Result<(), Errno> {
        self.log(format!("mkdir {}", path.display()));
        self.paths.borrow_mut().insert(path.to_path_buf());
        Ok(())
    }
    fn touch(&self, path: &Path) -> Result<(), Errno> {
        self.log(format!("touch {}", path.display()));
        self.paths.borrow_mut().insert(path.to_path_buf());
        Ok(())
    }
    fn mknod(&self, path: &Path, kind: SFlag, mode: u32, dev: u64) -> Result<(), Errno> {
        self.log(format!(
            "mknod {} {:o} {:o} {dev:#x}",
            path.display(),
            kind.bits(),
            mode
        ));
        Ok(())
    }
    fn chown(&self, path: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        self.log(format!("chown {} {uid:?} {gid:?}", path.display()));
        Ok(())
    }
    fn symlink(&self, target: &str, link: &Path) -> Result<(), Errno> {
        self.log(format!("symlink {} -> {target}", link.display()));
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.paths.borrow().contains(path)
    }
    fn fd_is_dir(&self, fd: BorrowedFd<'_>) -> bool {
        self.dir_fds.contains(&fd.as_raw_fd())
    }
}
