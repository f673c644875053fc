//! The one edge where module errors become ttrpc statuses.

use containerd_shim_protos::ttrpc;
use ttrpc::Code;

use crate::io::IoError;
use crate::rootfs::RootfsError;
use crate::sandbox::SandboxError;
use crate::spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unimplemented(String),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Cgroup(#[from] crate::cgroups::CgroupError),
    #[error(transparent)]
    Metrics(#[from] crate::cgroups::metrics::MetricsError),
    #[error(transparent)]
    Rlimit(#[from] crate::rlimit::RlimitError),
    #[error(transparent)]
    Devices(#[from] rund_devices::DeviceError),
    #[error(transparent)]
    Gate(#[from] rund_check::GateError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Userns(#[from] crate::userns::UsernsError),
    #[error(transparent)]
    Hook(#[from] crate::hooks::HookError),
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, ShimError>;

impl ShimError {
    pub fn code(&self) -> Code {
        match self {
            ShimError::NotFound(_) => Code::NOT_FOUND,
            ShimError::AlreadyExists(_) => Code::ALREADY_EXISTS,
            ShimError::InvalidArgument(_) | ShimError::Spec(_) | ShimError::Devices(_) => {
                Code::INVALID_ARGUMENT
            }
            // A broken node config is the node's fault, not the request's.
            ShimError::Config(_) => Code::FAILED_PRECONDITION,
            ShimError::Gate(_) | ShimError::Hook(_) => Code::FAILED_PRECONDITION,
            ShimError::Policy(_) => Code::PERMISSION_DENIED,
            ShimError::Userns(e) if e.is_refused() => Code::PERMISSION_DENIED,
            ShimError::Userns(e) if e.is_bad_input() => Code::INVALID_ARGUMENT,
            ShimError::Userns(e) if e.is_exhausted() => Code::RESOURCE_EXHAUSTED,
            ShimError::Userns(_) => Code::FAILED_PRECONDITION,
            ShimError::FailedPrecondition(_) | ShimError::Rlimit(_) => Code::FAILED_PRECONDITION,
            ShimError::Unimplemented(_) => Code::UNIMPLEMENTED,
            ShimError::Rootfs(RootfsError::Missing(_)) => Code::INVALID_ARGUMENT,
            ShimError::Rootfs(RootfsError::Unsupported(_)) => Code::UNIMPLEMENTED,
            ShimError::Cgroup(e) if e.is_unimplemented() => Code::UNIMPLEMENTED,
            ShimError::Cgroup(e) if e.is_bad_input() => Code::INVALID_ARGUMENT,
            ShimError::Cgroup(e) if e.is_precondition() => Code::FAILED_PRECONDITION,
            ShimError::Sandbox(SandboxError::Rpc {
                status: ttrpc::Error::RpcStatus(s),
                ..
            }) => s.code(),
            ShimError::Sandbox(SandboxError::IdMap(e)) if e.is_bad_input() => {
                Code::INVALID_ARGUMENT
            }
            ShimError::Io(IoError::Scheme(..)) => Code::UNIMPLEMENTED,
            _ => Code::INTERNAL,
        }
    }

    /// The message containerd shows the user: for agent errors, the agent's
    /// own text without ttrpc's wrapping.
    pub fn message(&self) -> String {
        match self {
            ShimError::Sandbox(SandboxError::Rpc {
                status: ttrpc::Error::RpcStatus(s),
                ..
            }) => s.message.clone(),
            other => other.to_string(),
        }
    }
}

impl From<ShimError> for ttrpc::Error {
    fn from(e: ShimError) -> Self {
        ttrpc::Error::RpcStatus(ttrpc::get_status(e.code(), e.message()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_at_the_edge() {
        assert_eq!(
            ShimError::Unimplemented("Checkpoint".into()).code(),
            Code::UNIMPLEMENTED
        );
        let spec = SpecError::Malformed("x".into());
        assert_eq!(ShimError::from(spec).code(), Code::INVALID_ARGUMENT);
        let agent = SandboxError::Rpc {
            rpc: "CreateProcess",
            status: ttrpc::Error::RpcStatus(ttrpc::get_status(
                Code::NOT_FOUND,
                "exec: \"nope\": not found",
            )),
        };
        let e = ShimError::from(agent);
        assert_eq!(e.code(), Code::NOT_FOUND);
        assert_eq!(e.message(), "exec: \"nope\": not found");
    }

    #[test]
    fn policy_refusals_are_permission_denied() {
        let refused = crate::policy::PolicyError::new("annotation x", "[policy] y", "no");
        assert_eq!(
            ShimError::from(refused.clone()).code(),
            Code::PERMISSION_DENIED
        );
        let userns = crate::userns::UsernsError::from(refused);
        assert_eq!(ShimError::from(userns).code(), Code::PERMISSION_DENIED);
    }
}
