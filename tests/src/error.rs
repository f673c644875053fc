//! The harness error type.

use std::path::PathBuf;

/// Anything the harness can fail at. Messages carry enough context to debug a red test.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} ({path}): {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("rund binaries not found: {0}")]
    RundBinsMissing(String),
    #[error("required host tool missing: {0}")]
    ToolMissing(String),
    #[error("containerd did not answer on {socket} within {secs}s; log tail:\n{log}")]
    NotReady {
        socket: String,
        secs: u64,
        log: String,
    },
    #[error("`{cmd}` timed out after {secs}s; stdout: {stdout:?}; stderr: {stderr:?}")]
    Timeout {
        cmd: String,
        secs: u64,
        stdout: String,
        stderr: String,
    },
    #[error("`{cmd}` failed ({status}); stderr: {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("unexpected output of `{cmd}`: {detail}")]
    Parse { cmd: String, detail: String },
    #[error("waiting for {what}: gave up after {secs}s; last seen: {last}")]
    WaitTimeout {
        what: String,
        secs: u64,
        last: String,
    },
    #[error("building OCI image: {0}")]
    Image(String),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach a description and a path to an io error.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| Error::Io {
            what,
            path: path.into(),
            source,
        })
    }
}
