//! `[userns]`: when a pod gets its own user namespace, what happens when it
//! cannot have one, and the node-wide id pool.

use oci_spec::runtime::Capability;
use serde::{Deserialize, Serialize};

/// Which pods are remapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RemapMode {
    /// Only pods that ask: a user namespace or id mappings in the spec (CRI
    /// `hostUsers: false`, `ctr run --uidmap`), or `rund.io/userns: "pod"`.
    #[default]
    Requested,
    /// Every pod, unless it is exempted (`rund.io/userns: host` where the
    /// policy allows it, or `on_privileged = "host"`).
    Always,
}

/// Mode "always": what happens to a privileged container, or one holding a
/// capability of `privileged_caps` in a network namespace the host owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnPrivileged {
    /// Create fails, naming the mode and this key.
    #[default]
    Refuse,
    /// The pod runs without a user namespace (logged). Only possible while
    /// the pod's sandbox is being created.
    Host,
}

/// What happens to a pod whose rootfs or binds sit on a filesystem that
/// cannot be idmapped (device nodes and kernel filesystems are bound plainly
/// and never count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnsupported {
    /// Create fails, naming the path, its filesystem and this key.
    #[default]
    Fail,
    /// The pod runs without a user namespace (logged); probed when the pod's
    /// sandbox is created.
    Host,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UsernsConfig {
    pub mode: RemapMode,
    pub on_privileged: OnPrivileged,
    /// Capabilities that only work in a network namespace the sandbox owns.
    pub privileged_caps: Vec<Capability>,
    pub on_unsupported: OnUnsupported,
    /// First host id of the pool.
    pub base: u32,
    /// Ids per sandbox.
    pub size: u32,
    /// Number of ranges in the pool.
    pub count: u32,
    /// The old switch, replaced by `mode`: set, it is an error that says so.
    #[serde(skip_serializing)]
    pub enabled: Option<bool>,
}

impl Default for UsernsConfig {
    fn default() -> Self {
        UsernsConfig {
            mode: RemapMode::default(),
            on_privileged: OnPrivileged::default(),
            privileged_caps: vec![Capability::NetAdmin],
            on_unsupported: OnUnsupported::default(),
            base: 1_000_000,
            size: 65_536,
            count: 1024,
            enabled: None,
        }
    }
}

/// A `[userns]` section serde accepts but rund does not.
#[derive(Debug, thiserror::Error)]
pub enum UsernsConfigError {
    #[error("[userns] enabled was replaced by mode: write mode = \"{instead}\" instead of enabled = {on}")]
    EnabledReplaced { on: bool, instead: &'static str },
}

impl UsernsConfig {
    /// Rejects what serde cannot: the replaced `enabled` key.
    pub fn validate(&self) -> Result<(), UsernsConfigError> {
        if let Some(on) = self.enabled {
            let instead = if on { "always" } else { "requested" };
            return Err(UsernsConfigError::EnabledReplaced { on, instead });
        }
        Ok(())
    }
}
