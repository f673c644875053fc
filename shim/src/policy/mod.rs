//! The admin's policy for privileged requests (`[policy]`, deny by
//! default): which requests a pod may make on its own, through annotations
//! or its environment, and up to which bound. See README.md for the choice
//! between "refused" and "ignored" for each request.

mod config;
pub mod devices;
pub mod limits;

pub use config::PolicyConfig;

/// A request the node's policy does not honour: Create fails with
/// PERMISSION_DENIED, naming the request and the key that decides.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{request} is refused by this node's rund policy ({key}): {reason}")]
pub struct PolicyError {
    /// What was asked, and where from (e.g. `annotation rund.io/gpus="all"`).
    pub request: String,
    /// The config key that would allow it (e.g. `[policy] allowed_gpus`).
    pub key: String,
    pub reason: String,
}

impl PolicyError {
    pub fn new(request: impl Into<String>, key: &str, reason: impl Into<String>) -> Self {
        PolicyError {
            request: request.into(),
            key: key.into(),
            reason: reason.into(),
        }
    }
}
