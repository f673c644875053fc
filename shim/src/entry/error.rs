//! Why `start`, `delete` or the server could not do their part; printed to
//! containerd, which shows it as the shim's reply.

use containerd_shim_protos::{protobuf, ttrpc};

#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("unknown action {0:?}")]
    UnknownAction(String),
    #[error("cwd: {0}")]
    Cwd(std::io::Error),
    #[error("spawn shim server: {0}")]
    Spawn(std::io::Error),
    #[error("shim server failed ({status}): {output}")]
    ServerFailed { status: String, output: String },
    #[error("write address file: {0}")]
    AddressFile(std::io::Error),
    #[error("write address: {0}")]
    WriteAddress(std::io::Error),
    #[error("encode: {0}")]
    Encode(protobuf::Error),
    #[error("write: {0}")]
    Write(std::io::Error),
    #[error("tokio: {0}")]
    Runtime(std::io::Error),
    #[error("-socket is required")]
    NoSocket,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("publisher: {0}")]
    Publisher(#[from] crate::task::publish::PublishError),
    #[error("{op} {path}: {source}")]
    Socket {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// Per-node mode: the node's shim could not take the pod.
    #[error("{0}")]
    Node(String),
    #[error("listener: {0}")]
    Listener(std::io::Error),
    #[error("ttrpc server: {0}")]
    Server(ttrpc::Error),
}
