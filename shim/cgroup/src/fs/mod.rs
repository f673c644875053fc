//! The syscall seam: every touch of the cgroup tree goes through [`CgroupFs`],
//! so tests can count mkdirs and run the pool against a fake tree.

mod fake;

pub use fake::FakeFs;

use std::fmt::Debug;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The few filesystem operations a cgroupfs needs.
pub trait CgroupFs: Send + Sync + Debug {
    /// Create one directory (not its parents).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Remove one (cgroup) directory.
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Rename a directory within its parent.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Write a control file in a single write(2).
    fn write(&self, path: &Path, data: &str) -> io::Result<()>;
    /// Read a whole control file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Names of the subdirectories of `path`.
    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// The real kernel cgroupfs.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl CgroupFs for RealFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        // No O_CREAT: a missing control file must be ENOENT, not a new file.
        let mut f = OpenOptions::new().write(true).truncate(true).open(path)?;
        f.write_all(data.as_bytes())
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(path)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(out)
    }
}

/// Counts of tree-changing calls seen by a [`CountingFs`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FsCounts {
    pub mkdir: u64,
    pub rmdir: u64,
    pub rename: u64,
    pub write: u64,
}

/// Wraps another [`CgroupFs`] and counts mkdir/rmdir/rename/write calls.
#[derive(Debug)]
pub struct CountingFs {
    inner: Arc<dyn CgroupFs>,
    mkdir: AtomicU64,
    rmdir: AtomicU64,
    rename: AtomicU64,
    write: AtomicU64,
}

impl CountingFs {
    pub fn new(inner: Arc<dyn CgroupFs>) -> Self {
        CountingFs {
            inner,
            mkdir: AtomicU64::new(0),
            rmdir: AtomicU64::new(0),
            rename: AtomicU64::new(0),
            write: AtomicU64::new(0),
        }
    }

    /// Snapshot of the counters.
    pub fn counts(&self) -> FsCounts {
        FsCounts {
            mkdir: self.mkdir.load(Ordering::Relaxed),
            rmdir: self.rmdir.load(Ordering::Relaxed),
            rename: self.rename.load(Ordering::Relaxed),
            write: self.write.load(Ordering::Relaxed),
        }
    }
}

impl CgroupFs for CountingFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.mkdir.fetch_add(1, Ordering::Relaxed);
        self.inner.mkdir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        self.rmdir.fetch_add(1, Ordering::Relaxed);
        self.inner.rmdir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.rename.fetch_add(1, Ordering::Relaxed);
        self.inner.rename(from, to)
    }
    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        self.write.fetch_add(1, Ordering::Relaxed);
        self.inner.write(path, data)
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        self.inner.read(path)
    }
    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.subdirs(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}
