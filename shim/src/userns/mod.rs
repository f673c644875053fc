//! User-namespace support: per-sandbox id ranges leased from a node-wide
//! pool, the per-pod decision (annotations, spec mappings), and idmapped
//! mounts so the rootfs is remapped without a chown. See README.md.

pub mod decide;
pub mod idmap;
pub mod idmount;
pub mod kernelfs;
pub mod lease;
pub mod nsholder;
pub mod pool;
pub mod privileged;

pub use decide::{binds_mode, decide, pod_asks, BindsMode, UsernsDecision, UsernsMode};
pub use idmount::{attach, first_unsupported, idmapped_clone, set_idmap};
pub use kernelfs::plain_bind_reason;
pub use lease::{Lease, LeaseEntry, LeaseStore, Owner, RepairReport};
pub use nsholder::{userns_of_pid, userns_with_maps};
pub use pool::Pool;

use idmap::IdMapping;

#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error("[userns] config: {0}")]
    Config(String),
    #[error(
        "user namespace id pool exhausted: {in_use} of {count} ranges in use (base {base}, size {size}); \
         raise [userns] count or free sandboxes"
    )]
    Exhausted {
        in_use: u32,
        count: u32,
        base: u32,
        size: u32,
    },
    #[error(
        "user namespace lease file {path} is corrupt: {reason}; its leases may still be live, so rund \
         will not overwrite it: repair it with `rund userns repair` (moves it aside and rebuilds the \
         leases from the live user namespaces)"
    )]
    Corrupt {
        path: String,
        reason: lease::LeaseFileError,
    },
    #[error("user namespace lease state {path}: {source}")]
    State {
        path: String,
        source: std::io::Error,
    },
    #[error("lease owner pid {0} is not running")]
    OwnerGone(i32),
    #[error(
        "sandbox id {id} already holds host ids {host_base}..{end} for a running sandbox (owner \
         pid {pid}): ids are leased by sandbox id, so two running pods cannot share one (the same \
         id in two containerd namespaces?); give this pod another id"
    )]
    IdInUse {
        id: String,
        pid: i32,
        host_base: u32,
        end: u64,
    },
    #[error("annotation {key}: {reason}")]
    Annotation { key: String, reason: String },
    #[error("spec user namespace mappings: {0}")]
    Mapping(String),
    #[error("spec user namespace mappings: {0}")]
    IdMap(#[from] idmap::IdMapError),
    #[error(
        "filesystem of {path} ({fstype}) does not support idmapped mounts, which a pod in a user \
         namespace needs; [userns] on_unsupported = \"host\" runs pods that did not ask for a user \
         namespace without one instead"
    )]
    IdmapUnsupported { path: String, fstype: String },
    #[error("idmapped mount of {path}: {reason}")]
    Idmap { path: String, reason: String },
    #[error("user namespace for an id mapping: {0}")]
    Namespace(String),
    #[error(transparent)]
    Refused(#[from] crate::policy::PolicyError),
}

impl UsernsError {
    /// The caller's input is wrong (annotation, spec mappings): INVALID_ARGUMENT.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            UsernsError::Annotation { .. } | UsernsError::Mapping(_) | UsernsError::IdInUse { .. }
        ) || matches!(self, UsernsError::IdMap(e) if e.is_bad_input())
    }

    /// The node's policy does not allow it: PERMISSION_DENIED.
    pub fn is_refused(&self) -> bool {
        matches!(self, UsernsError::Refused(_))
    }

    /// Retrying later may succeed (pool full): RESOURCE_EXHAUSTED.
    pub fn is_exhausted(&self) -> bool {
        matches!(self, UsernsError::Exhausted { .. })
    }

    /// The node cannot do it as configured (fs without idmap support,
    /// corrupt state, bad [userns] config): FAILED_PRECONDITION.
    pub fn is_precondition(&self) -> bool {
        matches!(
            self,
            UsernsError::IdmapUnsupported { .. }
                | UsernsError::Corrupt { .. }
                | UsernsError::Config(_)
        )
    }
}

/// `0 <host_base> <size>`: the single-extent map a lease gives a sandbox.
pub fn lease_map(lease: &Lease) -> Vec<IdMapping> {
    vec![IdMapping {
        container_id: 0,
        host_id: lease.host_base,
        size: lease.size,
    }]
}
