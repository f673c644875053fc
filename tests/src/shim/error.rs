//! Errors of the direct shim harness.

use std::path::PathBuf;

use containerd_shim_protos::ttrpc;

/// What the direct harness can fail at; each message says enough to debug a red test.
#[derive(Debug, thiserror::Error)]
pub enum ShimHarnessError {
    #[error("{what} ({path}): {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ttrpc {what}: {source}")]
    Ttrpc {
        what: &'static str,
        #[source]
        source: ttrpc::Error,
    },
    #[error("the shim server did not come up: {reason}; stderr: {stderr}; log: {log}")]
    NotServing {
        reason: String,
        stderr: String,
        log: String,
    },
    #[error("waiting for {what}: gave up after {secs}s; seen: {seen}")]
    WaitTimeout {
        what: String,
        secs: u64,
        seen: String,
    },
    #[error("decoding {what}: {reason}")]
    Decode { what: String, reason: String },
    #[error(transparent)]
    Harness(#[from] crate::error::Error),
}

pub type Result<T, E = ShimHarnessError> = std::result::Result<T, E>;

pub(crate) trait IoCtx<T> {
    fn io(self, what: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoCtx<T> for std::io::Result<T> {
    fn io(self, what: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| ShimHarnessError::Io {
            what,
            path: path.into(),
            source,
        })
    }
}
