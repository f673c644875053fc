//! What the task service refuses or fails at by itself (errors of the
//! modules it calls keep their own types). Codes are given in
//! `crate::error`.

use std::path::PathBuf;

use tokio::task::JoinError;

use crate::protowire::WireError;

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("container {id} already exists")]
    ContainerExists { id: String },
    #[error("exec {exec_id} already exists in {id}")]
    ExecExists { id: String, exec_id: String },
    #[error("container {id} not found")]
    ContainerNotFound { id: String },
    #[error("process {exec_id} of container {id} not found")]
    ProcessNotFound { id: String, exec_id: String },
    #[error("process {id}/{exec_id} already finished")]
    ProcessFinished { id: String, exec_id: String },
    #[error("rund does not support {what}")]
    Unsupported { what: &'static str },
    // Bad input.
    #[error("{what} id is empty")]
    EmptyId { what: &'static str },
    #[error("exec has no process spec")]
    NoProcessSpec,
    #[error("exec process spec is malformed: {0}")]
    MalformedProcess(#[source] serde_json::Error),
    #[error("update carries no resources")]
    NoResources,
    #[error("update resources are malformed: {0}")]
    MalformedResources(#[source] serde_json::Error),
    #[error(transparent)]
    RuntimeOptions(WireError),
    #[error(
        "{what} asks for an idmapped mount: rund idmaps binds only in a pod with a user \
         namespace, with binds \"idmap\""
    )]
    IdmapWithoutUserns { what: String },
    #[error(
        "{what}.{field} maps container root to {root:?}, not to the pod's host id {host_root} \
         (rund idmaps binds with the pod's map)"
    )]
    IdmapRootMismatch {
        what: String,
        field: &'static str,
        root: Option<u32>,
        host_root: u32,
    },

    // The state of this shim or its containers forbids it.
    #[error("this shim already runs a sandbox; container {id} is not part of it")]
    ShimTaken { id: String },
    #[error("pod sandbox {sandbox_id} is not running in this shim")]
    NotRunningHere { sandbox_id: String },
    #[error("pod sandbox {id} has exited (status {status})")]
    SandboxExited { id: String, status: u32 },
    #[error("the sandbox is gone")]
    SandboxGone,
    #[error("{id} is a pod sandbox: rund runs no process there to exec into")]
    ExecIntoPodSandbox { id: String },
    #[error("container {id} is not running: cannot exec {exec_id}")]
    ExecIntoStopped { id: String, exec_id: String },
    #[error("container {id} is paused: cannot exec in a paused container (resume it first)")]
    ExecIntoPaused { id: String },
    #[error("container {id} is not running")]
    NotRunning { id: String },
    #[error("container {id} has no cgroup")]
    NoCgroup { id: String },
    #[error("process {id}/{exec_id} already started")]
    AlreadyStarted { id: String, exec_id: String },
    #[error("process {id}/{exec_id} has exited: a stopped process cannot start")]
    StartAfterExit { id: String, exec_id: String },
    #[error("process {id}/{exec_id} is still running")]
    StillRunning { id: String, exec_id: String },
    #[error("process {id}/{exec_id} has no terminal")]
    NoTerminal { id: String, exec_id: String },
    #[error("pod sandbox {id} still has containers; remove them first")]
    PodHasContainers { id: String },

    // The node lacks what the request needs.
    #[error("cgroups are unavailable on this node: {0}")]
    CgroupsUnavailable(#[source] rund_cgroup::Error),
    #[error(
        "device {path}: host node {} does not exist to bind into the user namespace",
        host.display()
    )]
    NoHostDevice { path: String, host: PathBuf },

    // Faults of the shim itself.
    #[error("{what} task: {source}")]
    BlockingTask {
        what: &'static str,
        #[source]
        source: JoinError,
    },
    #[error("encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the container's cgroup was already taken")]
    CgroupTaken,
}

impl TaskError {
    /// A blocking task that panicked or was cancelled.
    pub fn blocking(what: &'static str) -> impl FnOnce(JoinError) -> TaskError {
        move |source| TaskError::BlockingTask { what, source }
    }
}
