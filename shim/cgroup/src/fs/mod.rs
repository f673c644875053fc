//! The syscall seam: every touch of the cgroup tree goes through [`CgroupFs`],
//! so tests can count mkdirs and run the pool against a fake tree.

mod fake;

pub use fake::FakeFs;

use crate::bpf::Insn;
use crate::error::Error;
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
    /// Write each value with a write(2) of its own, in order, through one
    /// open file (v1's `devices.allow` takes one rule per write). On
    /// failure, the index of the value that failed.
    fn write_each(&self, path: &Path, values: &[String]) -> Result<(), (usize, io::Error)> {
        for (i, v) in values.iter().enumerate() {
            self.write(path, v).map_err(|e| (i, e))?;
        }
        Ok(())
    }
    /// Read a whole control file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Names of the subdirectories of `path`.
    fn subdirs(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    /// v2: make `prog` the cgroup's BPF device filter, replacing the one
    /// attached to `dir` with no moment without a filter.
    fn set_device_filter(&self, dir: &Path, prog: &[Insn]) -> crate::Result<()>;
    /// v2: detach every device filter attached to `dir` itself.
    fn clear_device_filter(&self, dir: &Path) -> crate::Result<()>;
}

fn open_dir(dir: &Path) -> crate::Result<std::fs::File> {
    std::fs::File::open(dir).map_err(|e| Error::io("open", dir, e))
}

fn bpf_err(dir: &Path, e: crate::bpf::BpfError) -> Error {
    Error::Bpf {
        call: e.call,
        path: dir.to_path_buf(),
        source: e.source,
        log: e.log,
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
    fn write_each(&self, path: &Path, values: &[String]) -> Result<(), (usize, io::Error)> {
        if values.is_empty() {
            return Ok(());
        }
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(|e| (0, e))?;
        for (i, v) in values.iter().enumerate() {
            f.write_all(v.as_bytes()).map_err(|e| (i, e))?;
        }
        Ok(())
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
    fn set_device_filter(&self, dir: &Path, prog: &[Insn]) -> crate::Result<()> {
        use std::os::fd::AsFd;
        let f = open_dir(dir)?;
        crate::bpf::replace_device_filter(f.as_fd(), prog).map_err(|e| bpf_err(dir, e))
    }
    fn clear_device_filter(&self, dir: &Path) -> crate::Result<()> {
        use std::os::fd::AsFd;
        let f = open_dir(dir)?;
        crate::bpf::clear_device_filter(f.as_fd())
            .map(drop)
            .map_err(|e| bpf_err(dir, e))
    }
}

/// Counts of tree-changing calls seen by a [`CountingFs`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FsCounts {
    pub mkdir: u64,
    pub rmdir: u64,
    pub rename: u64,
    pub write: u64,
    /// Device filters set or cleared (v2).
    pub bpf: u64,
}

impl FsCounts {
    /// mkdir + rmdir + rename: the directory work the kernel serialises.
    pub fn dir_ops(&self) -> u64 {
        self.mkdir + self.rmdir + self.rename
    }
}

/// Wraps another [`CgroupFs`] and counts mkdir/rmdir/rename/write calls.
#[derive(Debug)]
pub struct CountingFs {
    inner: Arc<dyn CgroupFs>,
    mkdir: AtomicU64,
    rmdir: AtomicU64,
    rename: AtomicU64,
    write: AtomicU64,
    bpf: AtomicU64,
}

impl CountingFs {
    pub fn new(inner: Arc<dyn CgroupFs>) -> Self {
        CountingFs {
            inner,
            mkdir: AtomicU64::new(0),
            rmdir: AtomicU64::new(0),
            rename: AtomicU64::new(0),
            write: AtomicU64::new(0),
            bpf: AtomicU64::new(0),
        }
    }

    /// Snapshot of the counters.
    pub fn counts(&self) -> FsCounts {
        FsCounts {
            mkdir: self.mkdir.load(Ordering::Relaxed),
            rmdir: self.rmdir.load(Ordering::Relaxed),
            rename: self.rename.load(Ordering::Relaxed),
            write: self.write.load(Ordering::Relaxed),
            bpf: self.bpf.load(Ordering::Relaxed),
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
    fn write_each(&self, path: &Path, values: &[String]) -> Result<(), (usize, io::Error)> {
        self.write.fetch_add(values.len() as u64, Ordering::Relaxed);
        self.inner.write_each(path, values)
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
    fn set_device_filter(&self, dir: &Path, prog: &[Insn]) -> crate::Result<()> {
        self.bpf.fetch_add(1, Ordering::Relaxed);
        self.inner.set_device_filter(dir, prog)
    }
    fn clear_device_filter(&self, dir: &Path) -> crate::Result<()> {
        self.bpf.fetch_add(1, Ordering::Relaxed);
        self.inner.clear_device_filter(dir)
    }
}
