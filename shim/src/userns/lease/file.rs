//! The leases file and its lock. Every read-modify-write happens under an
//! exclusive flock on `leases.lock`; the file is replaced atomically
//! (write temp, rename), so readers never see half a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::LeaseEntry;
use crate::userns::pool::overlaps;
use crate::userns::UsernsError;

pub const FORMAT_VERSION: u32 = 1;
pub const LEASES_FILE: &str = "leases.json";
const LOCK_FILE: &str = "leases.lock";

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFile {
    pub version: u32,
    pub leases: Vec<LeaseEntry>,
}

/// Holds the lock for as long as it lives.
pub struct Locked {
    _lock: Flock<File>,
    pub path: PathBuf,
}

fn state_err(path: &Path) -> impl FnOnce(std::io::Error) -> UsernsError + '_ {
    move |source| UsernsError::State {
        path: path.display().to_string(),
        source,
    }
}

/// Creates `dir` (0700) if needed and takes the exclusive lock.
pub fn lock(dir: &Path) -> Result<Locked, UsernsError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(state_err(dir))?;
    let lock_path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(state_err(&lock_path))?;
    let lock = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| state_err(&lock_path)(std::io::Error::from(e)))?;
    Ok(Locked {
        _lock: lock,
        path: dir.join(LEASES_FILE),
    })
}

impl Locked {
    /// The leases; a missing file is an empty set, anything unreadable is
    /// `Corrupt` (never silently reset: those leases may be live).
    pub fn load(&self) -> Result<LeaseFile, UsernsError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LeaseFile {
                    version: FORMAT_VERSION,
                    leases: vec![],
                })
            }
            Err(e) => return Err(state_err(&self.path)(e)),
        };
        parse(&bytes).map_err(|reason| UsernsError::Corrupt {
            path: self.path.display().to_string(),
            reason,
        })
    }

    pub fn store(&self, file: &LeaseFile) -> Result<(), UsernsError> {
        let tmp = self.path.with_extension("json.tmp");
        let bytes = render(file);
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            // No fsync: rename is atomic against process crashes, and after
            // a machine crash every lease is dead anyway (the boot id changed).
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            state_err(&self.path)(e)
        })
    }
}

/// Why a leases file is refused.
#[derive(Debug, thiserror::Error)]
pub enum LeaseFileError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("format version {0} (this rund reads {FORMAT_VERSION})")]
    Version(u32),
    #[error("lease {0} has an empty sandbox id")]
    EmptyId(usize),
    #[error("lease {id:?} has an invalid range {host_base}+{size}")]
    BadRange {
        id: String,
        host_base: u32,
        size: u32,
    },
    #[error("sandbox {0:?} has two leases")]
    Twice(String),
    #[error("leases {0:?} and {1:?} overlap")]
    Overlap(String, String),
}

/// A leases file's bytes, checked as `load` checks them (the fuzz target's
/// entry point too).
#[doc(hidden)]
pub fn parse(bytes: &[u8]) -> Result<LeaseFile, LeaseFileError> {
    let file: LeaseFile = serde_json::from_slice(bytes)?;
    if file.version != FORMAT_VERSION {
        return Err(LeaseFileError::Version(file.version));
    }
    check_invariants(&file.leases)?;
    Ok(file)
}

/// What `store` writes.
#[doc(hidden)]
pub fn render(file: &LeaseFile) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(file).expect("lease file serialises");
    bytes.push(b'\n');
    bytes
}

/// What allocate relies on: sane ranges; one lease per pool-leased sandbox,
/// disjoint from every other range. Spec ranges (several per sandbox) may
/// overlap each other: the specs chose them.
fn check_invariants(leases: &[LeaseEntry]) -> Result<(), LeaseFileError> {
    for (i, l) in leases.iter().enumerate() {
        let r = &l.lease;
        if l.sandbox_id.is_empty() {
            return Err(LeaseFileError::EmptyId(i));
        }
        if r.size == 0 || r.host_base == 0 || r.host_base as u64 + r.size as u64 > u32::MAX as u64 {
            return Err(LeaseFileError::BadRange {
                id: l.sandbox_id.clone(),
                host_base: r.host_base,
                size: r.size,
            });
        }
        for o in &leases[..i] {
            let both_spec = r.index == super::SPEC_INDEX && o.lease.index == super::SPEC_INDEX;
            if both_spec {
                continue;
            }
            if o.sandbox_id == l.sandbox_id {
                return Err(LeaseFileError::Twice(l.sandbox_id.clone()));
            }
            if overlaps(r.host_base, r.size, o.lease.host_base, o.lease.size) {
                return Err(LeaseFileError::Overlap(
                    o.sandbox_id.clone(),
                    l.sandbox_id.clone(),
                ));
            }
        }
    }
    Ok(())
}
