//! Errors of `rund install` / `rund uninstall`. Each names the file or setting at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("containerd config {path} is not valid TOML: {reason}")]
    ConfigParse { path: PathBuf, reason: String },
    #[error("containerd config {path}: {reason}")]
    ConfigUnsupported { path: PathBuf, reason: String },
    #[error("{path} already registers a `rund` runtime ({table}) that `rund install` did not write; remove it, or leave the registration as it is")]
    AlreadyRegistered { path: PathBuf, table: String },
    #[error("{path} exists and was not written by `rund install`; not overwriting it")]
    Foreign { path: PathBuf },
    #[error("cannot tell containerd's version: {0}; pass --containerd-version")]
    Version(String),
    #[error("rund binary {path} missing: {reason}")]
    MissingBinary { path: PathBuf, reason: String },
    #[error("install manifest {path}: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("restarting containerd: {0}")]
    Restart(String),
    #[error("path {0:?} is not valid UTF-8")]
    NotUtf8(PathBuf),
}

pub(super) trait IoCtx<T> {
    fn ctx(self, what: &'static str, path: &std::path::Path) -> Result<T, InstallError>;
}

impl<T> IoCtx<T> for std::io::Result<T> {
    fn ctx(self, what: &'static str, path: &std::path::Path) -> Result<T, InstallError> {
        self.map_err(|source| InstallError::Io {
            what,
            path: path.to_path_buf(),
            source,
        })
    }
}
