//! Typed errors of the crate. Every variant names the file or field involved.

use std::io;
use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong, with enough context for a user-facing message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem operation on the cgroup tree failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The kernel refused a value written to a control file (for example a
    /// memory limit below current usage gives EBUSY).
    #[error("cgroup: writing {value:?} to {path} failed: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    /// A resource value is invalid before it reaches the kernel.
    #[error("cgroup: invalid {field}: {reason}")]
    InvalidResource { field: &'static str, reason: String },
    /// The OCI cgroupsPath cannot be used.
    #[error("cgroup: invalid cgroupsPath {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    /// A controller needed by the requested resources is not mounted.
    #[error("cgroup: controller {0} is not available on this host")]
    ControllerMissing(&'static str),
    /// The feature is not implemented (the shim maps this to UNIMPLEMENTED).
    #[error("cgroup: not implemented: {0}")]
    Unimplemented(String),
    /// A `[cgroup]` config value cannot work.
    #[error("rund config [cgroup] {key}: {reason}")]
    Config { key: &'static str, reason: String },
    /// A pool operation was asked for with `cgroup.pool = off`.
    #[error("cgroup: the pool is off (`[cgroup] pool = \"off\"` in the rund config)")]
    PoolOff,
    /// A cgroup of that name already exists.
    #[error("cgroup: {0} already exists")]
    AlreadyExists(PathBuf),
    /// The cgroup does not exist.
    #[error("cgroup: {0} does not exist")]
    NotFound(PathBuf),
    /// Processes stayed in the cgroup past the timeout.
    #[error("cgroup: {path} still has {count} process(es) after {waited_ms} ms")]
    NotEmpty {
        path: PathBuf,
        count: usize,
        waited_ms: u64,
    },
    /// The freezer did not reach the wanted state in time.
    #[error("cgroup: freezer of {path} stuck in {state:?} (wanted {wanted})")]
    FreezeTimeout {
        path: PathBuf,
        state: String,
        wanted: &'static str,
    },
    /// The cgroup watched for OOM was removed.
    #[error("cgroup: the watched cgroup was removed")]
    CgroupGone,
    /// Parsing a kernel file failed.
    #[error("cgroup: cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    /// The pool state directory could not be used.
    #[error("cgroup pool state {path}: {reason}")]
    State { path: PathBuf, reason: String },
    /// A bpf(2) call for the v2 device filter failed.
    #[error("cgroup: {call} for {path}: {source}{}", verifier(.log))]
    Bpf {
        call: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
        /// The verifier's log when a program load was refused.
        log: String,
    },
    /// A system call failed.
    #[error("cgroup: {call}: {source}")]
    Sys {
        call: &'static str,
        #[source]
        source: nix::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The errno behind this error, if any (lets callers map EBUSY etc.).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::Write { source, .. } | Error::Bpf { source, .. } => {
                source.raw_os_error()
            }
            Error::Sys { source, .. } => Some(*source as i32),
            _ => None,
        }
    }

    /// True for errors the shim should answer with UNIMPLEMENTED.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, Error::Unimplemented(_))
    }
}

fn verifier(log: &str) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!(" (verifier: {log})")
    }
}
