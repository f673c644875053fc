//! The one edge where module errors become ttrpc statuses.

use containerd_shim_protos::ttrpc;
use ttrpc::Code;

use crate::io::IoError;
use crate::rootfs::RootfsError;
use crate::sandbox::SandboxError;
use crate::sandboxer::SandboxerError;
use crate::spec::SpecError;
use crate::task::TaskError;

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
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
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Sandboxer(#[from] SandboxerError),
}

pub type Result<T> = std::result::Result<T, ShimError>;

impl ShimError {
    pub fn code(&self) -> Code {
        match self {
            ShimError::Spec(_) | ShimError::Devices(_) => Code::INVALID_ARGUMENT,
            ShimError::Task(e) => task_code(e),
            ShimError::Sandboxer(e) => sandboxer_code(e),
            // A broken node config is the node's fault, not the request's.
            ShimError::Config(_) => Code::FAILED_PRECONDITION,
            ShimError::Gate(_) | ShimError::Hook(_) => Code::FAILED_PRECONDITION,
            ShimError::Policy(_) => Code::PERMISSION_DENIED,
            ShimError::Userns(e) if e.is_refused() => Code::PERMISSION_DENIED,
            ShimError::Userns(e) if e.is_bad_input() => Code::INVALID_ARGUMENT,
            ShimError::Userns(e) if e.is_exhausted() => Code::RESOURCE_EXHAUSTED,
            ShimError::Userns(_) => Code::FAILED_PRECONDITION,
            ShimError::Rlimit(_) => Code::FAILED_PRECONDITION,
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

fn task_code(e: &TaskError) -> Code {
    use TaskError as T;
    match e {
        T::ContainerExists { .. } | T::ExecExists { .. } => Code::ALREADY_EXISTS,
        T::ContainerNotFound { .. } | T::ProcessNotFound { .. } | T::ProcessFinished { .. } => {
            Code::NOT_FOUND
        }
        T::Unsupported { .. } => Code::UNIMPLEMENTED,
        T::EmptyId { .. }
        | T::NoProcessSpec
        | T::MalformedProcess(_)
        | T::NoResources
        | T::MalformedResources(_)
        | T::RuntimeOptions(_)
        | T::IdmapWithoutUserns { .. }
        | T::IdmapRootMismatch { .. } => Code::INVALID_ARGUMENT,
        T::ShimTaken { .. }
        | T::NotRunningHere { .. }
        | T::SandboxExited { .. }
        | T::SandboxGone
        | T::ExecIntoPodSandbox { .. }
        | T::ExecIntoStopped { .. }
        | T::ExecIntoPaused { .. }
        | T::NotRunning { .. }
        | T::NoCgroup { .. }
        | T::AlreadyStarted { .. }
        | T::StartAfterExit { .. }
        | T::StillRunning { .. }
        | T::NoTerminal { .. }
        | T::PodHasContainers { .. }
        | T::CgroupsUnavailable(_)
        | T::NoHostDevice { .. } => Code::FAILED_PRECONDITION,
        T::BlockingTask { .. } | T::Encode { .. } | T::CgroupTaken => Code::INTERNAL,
    }
}

fn sandboxer_code(e: &SandboxerError) -> Code {
    use SandboxerError as S;
    match e {
        S::Unknown { .. } => Code::NOT_FOUND,
        S::Exists { .. } => Code::ALREADY_EXISTS,
        S::PodConfig(_) | S::OptionsType { .. } | S::Spec(_) => Code::INVALID_ARGUMENT,
        S::NotRunning { .. } | S::Exited { .. } => Code::FAILED_PRECONDITION,
        S::Encode(_) | S::BundleWrite { .. } => Code::INTERNAL,
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
        let checkpoint = TaskError::Unsupported { what: "Checkpoint" };
        assert_eq!(ShimError::from(checkpoint).code(), Code::UNIMPLEMENTED);
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

    fn json_error() -> serde_json::Error {
        serde_json::from_str::<u8>("not json").unwrap_err()
    }

    async fn join_error() -> tokio::task::JoinError {
        tokio::task::spawn_blocking(|| panic!("a blocking task panics"))
            .await
            .unwrap_err()
    }

    fn code_of(e: impl Into<ShimError>) -> Code {
        e.into().code()
    }

    #[tokio::test]
    async fn task_errors_map_by_class() {
        let s = String::from;
        let bad_input = [
            TaskError::EmptyId { what: "exec" },
            TaskError::NoProcessSpec,
            TaskError::MalformedProcess(json_error()),
            TaskError::NoResources,
            TaskError::MalformedResources(json_error()),
            TaskError::RuntimeOptions(crate::protowire::WireError {
                what: "runtime options",
                reason: s("truncated"),
            }),
            TaskError::IdmapWithoutUserns {
                what: s("mounts[0]"),
            },
            TaskError::IdmapRootMismatch {
                what: s("mounts[0]"),
                field: "uidMappings",
                root: Some(0),
                host_root: 100000,
            },
        ];
        for e in bad_input {
            let m = e.to_string();
            assert_eq!(code_of(e), Code::INVALID_ARGUMENT, "{m}");
        }
        let (id, exec_id) = (s("c"), s("e"));
        let precondition = [
            TaskError::ShimTaken { id: id.clone() },
            TaskError::NotRunningHere { sandbox_id: s("p") },
            TaskError::SandboxExited {
                id: s("p"),
                status: 1,
            },
            TaskError::SandboxGone,
            TaskError::ExecIntoPodSandbox { id: s("p") },
            TaskError::ExecIntoStopped {
                id: id.clone(),
                exec_id: exec_id.clone(),
            },
            TaskError::ExecIntoPaused { id: id.clone() },
            TaskError::NotRunning { id: id.clone() },
            TaskError::NoCgroup { id: id.clone() },
            TaskError::AlreadyStarted {
                id: id.clone(),
                exec_id: exec_id.clone(),
            },
            TaskError::StartAfterExit {
                id: id.clone(),
                exec_id: exec_id.clone(),
            },
            TaskError::StillRunning {
                id: id.clone(),
                exec_id: exec_id.clone(),
            },
            TaskError::NoTerminal {
                id: id.clone(),
                exec_id,
            },
            TaskError::PodHasContainers { id: s("p") },
            TaskError::CgroupsUnavailable(rund_cgroup::Error::ControllerMissing("cpu")),
            TaskError::NoHostDevice {
                path: s("/dev/x"),
                host: "/dev/x".into(),
            },
        ];
        for e in precondition {
            let m = e.to_string();
            assert_eq!(code_of(e), Code::FAILED_PRECONDITION, "{m}");
        }
        let faults = [
            TaskError::BlockingTask {
                what: "rootfs",
                source: join_error().await,
            },
            TaskError::Encode {
                what: "spec",
                source: json_error(),
            },
            TaskError::CgroupTaken,
        ];
        for e in faults {
            let m = e.to_string();
            assert_eq!(code_of(e), Code::INTERNAL, "{m}");
        }
        let (id, exec_id) = (s("c1"), s("e1"));
        let named = [
            (
                TaskError::ContainerExists { id: id.clone() },
                Code::ALREADY_EXISTS,
            ),
            (
                TaskError::ExecExists {
                    id: id.clone(),
                    exec_id: exec_id.clone(),
                },
                Code::ALREADY_EXISTS,
            ),
            (
                TaskError::ContainerNotFound { id: id.clone() },
                Code::NOT_FOUND,
            ),
            (
                TaskError::ProcessNotFound {
                    id: id.clone(),
                    exec_id: exec_id.clone(),
                },
                Code::NOT_FOUND,
            ),
            (TaskError::ProcessFinished { id, exec_id }, Code::NOT_FOUND),
            (TaskError::Unsupported { what: "x" }, Code::UNIMPLEMENTED),
        ];
        for (e, want) in named {
            let m = e.to_string();
            assert!(m.contains("c1") || m.contains("support"), "{m}");
            assert_eq!(code_of(e), want, "{m}");
        }
    }

    #[test]
    fn task_messages_name_what_failed() {
        let e = ShimError::from(TaskError::ExecIntoStopped {
            id: "web".into(),
            exec_id: "sh".into(),
        });
        assert_eq!(e.message(), "container web is not running: cannot exec sh");
        let e = ShimError::from(TaskError::EmptyId { what: "container" });
        assert_eq!(e.message(), "container id is empty");
    }

    #[test]
    fn sandboxer_errors_map_by_class() {
        let id = || String::from("p");
        let io = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let cases = [
            (SandboxerError::Unknown { id: id() }, Code::NOT_FOUND),
            (SandboxerError::Exists { id: id() }, Code::ALREADY_EXISTS),
            (
                SandboxerError::OptionsType {
                    type_url: "x".into(),
                    wanted: "y",
                },
                Code::INVALID_ARGUMENT,
            ),
            (SandboxerError::Spec(json_error()), Code::INVALID_ARGUMENT),
            (
                SandboxerError::PodConfig(crate::protowire::WireError {
                    what: "pod config",
                    reason: "truncated".into(),
                }),
                Code::INVALID_ARGUMENT,
            ),
            (
                SandboxerError::NotRunning { id: id() },
                Code::FAILED_PRECONDITION,
            ),
            (
                SandboxerError::Exited { id: id() },
                Code::FAILED_PRECONDITION,
            ),
            (SandboxerError::Encode(json_error()), Code::INTERNAL),
            (
                SandboxerError::BundleWrite {
                    path: "/b/config.json".into(),
                    source: io,
                },
                Code::INTERNAL,
            ),
        ];
        for (e, want) in cases {
            let m = e.to_string();
            assert_eq!(code_of(e), want, "{m}");
        }
    }
}
