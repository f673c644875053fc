//! The shim<->agent contract: generated ttrpc bindings for `protos/agent.proto`,
//! the fd side channel, and the JSON options both sides agree on.

pub mod fdpass;
pub mod launch;
pub mod options;
pub mod sysctl;

/// Blocking bindings (used by nothing today, kept for tools and tests).
pub mod sync {
    #![allow(warnings, clippy::all)]
    pub mod agent {
        include!(concat!(env!("OUT_DIR"), "/sync/agent.rs"));
    }
    pub mod agent_ttrpc {
        include!(concat!(env!("OUT_DIR"), "/sync/agent_ttrpc.rs"));
    }
}

/// Async bindings: the shim's client and the agent's server.
pub mod r#async {
    #![allow(warnings, clippy::all)]
    pub use crate::sync::agent;
    pub mod agent_ttrpc {
        pub use crate::sync::agent;
        include!(concat!(env!("OUT_DIR"), "/async/agent_ttrpc.rs"));
    }
}

pub use r#async::agent_ttrpc::{create_agent, Agent, AgentClient};
pub use sync::agent::*;
pub use ttrpc;
