//! A recorder standing in for the kernel in unit tests. Every fd it hands
//! out is a /dev/null fd with a name (the path it stands for), so recorded
//! calls read like "move_mount fd7 /r/data".

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sys::stat::SFlag;

use super::Syscall;
use crate::container::paths::Create;

#[derive(Default)]
pub struct Recorder {
    pub calls: RefCell<Vec<String>>,
    /// Paths that "exist" (seeded, or created by the recorded calls).
    pub paths: RefCell<HashSet<PathBuf>>,
    /// Existing paths that are directories.
    pub dirs: RefCell<HashSet<PathBuf>>,
    /// Raw fds (passed in by the test) that "are directories".
    pub dir_fds: HashSet<i32>,
    /// fstypes whose mount fails with EPERM.
    pub refuse: HashSet<String>,
    pub names: RefCell<HashMap<i32, String>>,
}

fn norm(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

impl Recorder {
    fn log(&self, s: String) {
        self.calls.borrow_mut().push(s);
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
    /// A new fd standing for `name`.
    pub fn fd(&self, name: &str) -> OwnedFd {
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").expect("open /dev/null"));
        self.names
            .borrow_mut()
            .insert(fd.as_raw_fd(), name.to_string());
        fd
    }
    /// A new fd for an existing directory `path` (e.g. the root).
    pub fn dir(&self, path: &str) -> OwnedFd {
        self.seed_dir(path);
        self.fd(path)
    }
    pub fn seed_dir(&self, path: &str) {
        self.paths.borrow_mut().insert(PathBuf::from(path));
        self.dirs.borrow_mut().insert(PathBuf::from(path));
    }
    pub fn name(&self, fd: BorrowedFd<'_>) -> String {
        self.names
            .borrow()
            .get(&fd.as_raw_fd())
            .cloned()
            .unwrap_or_else(|| format!("fd{}", fd.as_raw_fd()))
    }
    fn join(&self, dir: BorrowedFd<'_>, name: &str) -> PathBuf {
        PathBuf::from(self.name(dir)).join(name)
    }
}

impl Syscall for Recorder {
    fn resolve(&self, root: BorrowedFd<'_>, path: &Path, create: Create) -> Result<OwnedFd, Errno> {
        let full = PathBuf::from(self.name(root)).join(norm(path).strip_prefix("/").unwrap());
        let full = PathBuf::from(full.to_string_lossy().trim_end_matches('/'));
        if !self.paths.borrow().contains(&full) {
            match create {
                Create::No => return Err(Errno::ENOENT),
                Create::Dir => {
                    self.log(format!("mkdir {}", full.display()));
                    self.dirs.borrow_mut().insert(full.clone());
                }
                Create::File => self.log(format!("touch {}", full.display())),
            }
            self.paths.borrow_mut().insert(full.clone());
        }
        Ok(self.fd(&full.to_string_lossy()))
    }
    fn open_path(&self, path: &Path) -> Result<OwnedFd, Errno> {
        Ok(self.fd(&path.to_string_lossy()))
    }
    fn move_mount(&self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
        self.log(format!("move_mount {} {}", self.name(from), self.name(to)));
        Ok(())
    }
    fn fs_mount(
        &self,
        fstype: &str,
        source: &str,
        flags: MsFlags,
        data: Option<&str>,
    ) -> Result<OwnedFd, Errno> {
        if self.refuse.contains(fstype) {
            return Err(Errno::EPERM);
        }
        self.log(format!(
            "fsmount {fstype} {source} {:#x} {}",
            flags.bits(),
            data.unwrap_or("")
        ));
        Ok(self.fd(fstype))
    }
    fn clone_tree(&self, fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, Errno> {
        let name = self.name(fd);
        self.log(format!("clone {name} rec={recursive}"));
        Ok(self.fd(&format!("clone:{name}")))
    }
    fn set_attr(
        &self,
        mnt: BorrowedFd<'_>,
        set: u64,
        clr: u64,
        recursive: bool,
    ) -> Result<(), Errno> {
        self.log(format!(
            "setattr {} set={set:#x} clr={clr:#x} rec={recursive}",
            self.name(mnt)
        ));
        Ok(())
    }
    fn set_propagation(&self, mnt: BorrowedFd<'_>, how: MsFlags) -> Result<(), Errno> {
        let kind = if how.contains(MsFlags::MS_SHARED) {
            "shared"
        } else if how.contains(MsFlags::MS_SLAVE) {
            "slave"
        } else if how.contains(MsFlags::MS_UNBINDABLE) {
            "unbindable"
        } else {
            "private"
        };
        let r = if how.contains(MsFlags::MS_REC) {
            "r"
        } else {
            ""
        };
        self.log(format!("propagation {} {r}{kind}", self.name(mnt)));
        Ok(())
    }
    fn stat(&self, fd: BorrowedFd<'_>) -> Result<(SFlag, u32), Errno> {
        let name = PathBuf::from(self.name(fd));
        if self.dir_fds.contains(&fd.as_raw_fd()) || self.dirs.borrow().contains(&name) {
            Ok((SFlag::S_IFDIR, 0o755))
        } else {
            Ok((SFlag::S_IFREG, 0o644))
        }
    }
    fn same_file(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, Errno> {
        Ok(self.name(a) == self.name(b))
    }
    fn mknodat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        kind: SFlag,
        mode: u32,
        dev: u64,
    ) -> Result<(), Errno> {
        let path = self.join(dir, name);
        self.log(format!(
            "mknod {} {:o} {:o} {dev:#x}",
            path.display(),
            kind.bits(),
            mode
        ));
        self.paths.borrow_mut().insert(path);
        Ok(())
    }
    fn chownat(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), Errno> {
        let path = self.join(dir, name);
        self.log(format!("chown {} {uid:?} {gid:?}", path.display()));
        Ok(())
    }
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
        let path = self.join(dir, name);
        self.log(format!("symlink {} -> {target}", path.display()));
        self.paths.borrow_mut().insert(path);
        Ok(())
    }
}
