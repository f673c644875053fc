//! Node-wide result cache: one JSON file per device in the state dir, written atomically,
//! guarded by an flock on `<device>.lock`, and self-checked with a checksum so a torn or
//! edited file is discarded, never trusted.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::engine::report::BwReport;

pub const CACHE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CachedResult {
    Measured(BwReport),
    /// The check could not run or failed; the error text.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub version: u32,
    pub device: String,
    pub measured_at_unix: u64,
    pub size: u64,
    pub iters: u64,
    pub result: CachedResult,
    #[serde(default)]
    pub checksum: String,
}

/// FNV-1a 64 over the entry serialised with an empty checksum.
fn checksum(e: &Entry) -> String {
    let mut c = e.clone();
    c.checksum = String::new();
    let bytes = serde_json::to_vec(&c).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl Entry {
    pub fn seal(mut self) -> Self {
        self.checksum = checksum(&self);
        self
    }
}

/// What reading the cache found.
#[derive(Debug)]
pub enum Lookup {
    Missing,
    /// Present but not trustworthy (unparsable, bad checksum, wrong device/version).
    Corrupt(String),
    Found(Entry),
}

pub struct Cache {
    dir: PathBuf,
}

/// Device names become file names: keep them to a safe alphabet.
pub fn valid_device_name(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 64
        && !d.starts_with('.')
        && d.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, device: &str) -> PathBuf {
        self.dir.join(format!("{device}.json"))
    }

    /// Takes the per-device exclusive lock, blocking until it is free.
    pub fn lock(&self, device: &str) -> io::Result<Flock<File>> {
        fs::create_dir_all(&self.dir)?;
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(format!("{device}.lock")))?;
        Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))
    }

    pub fn read(&self, device: &str) -> io::Result<Lookup> {
        let data = match fs::read(self.path(device)) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Lookup::Missing),
            Err(e) => return Err(e),
        };
        let e: Entry = match serde_json::from_slice(&data) {
            Ok(e) => e,
            Err(err) => return Ok(Lookup::Corrupt(format!("unparsable: {err}"))),
        };
        if e.version != CACHE_VERSION {
            return Ok(Lookup::Corrupt(format!(
                "version {} != {CACHE_VERSION}",
                e.version
            )));
        }
        if e.device != device {
            return Ok(Lookup::Corrupt(format!("entry is for {:?}", e.device)));
        }
        if e.checksum != checksum(&e) {
            return Ok(Lookup::Corrupt("checksum mismatch".into()));
        }
        Ok(Lookup::Found(e))
    }

    pub fn discard(&self, device: &str) -> io::Result<()> {
        match fs::remove_file(self.path(device)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Write to a temp file, fsync, rename: readers see the old or the new file, never half.
    pub fn write(&self, entry: &Entry) -> io::Result<()> {
        let path = self.path(&entry.device);
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(
            ".{}.json.tmp.{}.{n}",
            entry.device,
            std::process::id()
        ));
        let res = (|| {
            let mut f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(entry).map_err(io::Error::other)?)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }
}
