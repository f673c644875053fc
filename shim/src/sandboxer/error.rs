//! What the sandbox API refuses or fails at. Codes are given in
//! `crate::error`.

use std::path::PathBuf;

use crate::protowire::WireError;

#[derive(Debug, thiserror::Error)]
pub enum SandboxerError {
    #[error("sandbox {id} is not in this shim")]
    Unknown { id: String },
    #[error("this shim already has sandbox {id}")]
    Exists { id: String },
    #[error(transparent)]
    PodConfig(WireError),
    #[error("CreateSandbox options of type {type_url} (rund reads {wanted})")]
    OptionsType {
        type_url: String,
        wanted: &'static str,
    },
    #[error("sandbox spec: {0}")]
    Spec(#[source] serde_json::Error),
    #[error("sandbox {id} is not running")]
    NotRunning { id: String },
    #[error("sandbox {id} has exited")]
    Exited { id: String },
    #[error("encode sandbox spec: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("write {}: {source}", path.display())]
    BundleWrite {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
