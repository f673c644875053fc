//! The sandbox: one `rund-agent` (PID 1 of new namespaces) per pod, spawned
//! and driven by the shim.

pub mod client;
pub mod handle;
pub mod idmap;
pub mod nsfd;
pub mod pidmap;
pub mod spawn;

pub use client::Agent;
pub use handle::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("starting the sandbox agent: {0}")]
    Spawn(String),
    #[error("sandbox agent: {0}")]
    Agent(String),
    #[error("user namespace mapping: {0}")]
    BadMapping(String),
    #[error("agent rpc {rpc}: {status}")]
    Rpc {
        rpc: &'static str,
        status: ttrpc::Error,
    },
    #[error("passing fds to the agent: {0}")]
    FdPass(#[from] rund_proto::fdpass::FdPassError),
    #[error("finding the host pid of agent pid {0}: {1}")]
    PidLookup(u32, pidmap::PidMapError),
    #[error("{0}")]
    Namespace(String),
    #[error("the sandbox agent has exited")]
    Gone,
}
