//! The shim<->agent contract: generated ttrpc bindings for `protos/agent.proto`,
//! the fd side channel, the launch handshake and the connection helpers.

pub mod coalesce;
pub mod conn;
pub mod fdpass;
pub mod launch;
pub mod quiet;
pub mod sysctl;

/// Bumped on every incompatible change to this crate's wire formats; the
/// shim sends it in Ping and the agent refuses a different one.
pub const PROTOCOL_VERSION: u32 = 4;

/// Generated messages.
pub mod agent {
    #![allow(warnings, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/agent.rs"));
}

/// Generated async client and server.
pub mod agent_ttrpc {
    #![allow(warnings, clippy::all)]
    pub use crate::agent;
    include!(concat!(env!("OUT_DIR"), "/agent_ttrpc.rs"));
}

pub use agent::*;
pub use agent_ttrpc::{create_agent, Agent, AgentClient};
pub use ttrpc;

/// The namespace kinds a [`NamespacePlan`] covers, in the agent's join order.
pub const PLANNED_NAMESPACES: [&str; 5] = ["pid", "net", "ipc", "uts", "cgroup"];

impl NamespacePlan {
    /// The source of namespace `kind` ("pid", "net", "ipc", "uts", "cgroup").
    pub fn source(&self, kind: &str) -> NsSource {
        let field = match kind {
            "pid" => &self.pid,
            "net" => &self.net,
            "ipc" => &self.ipc,
            "uts" => &self.uts,
            "cgroup" => &self.cgroup,
            _ => return NsSource::NS_NEW,
        };
        field.enum_value_or_default()
    }

    pub fn set(&mut self, kind: &str, source: NsSource) {
        let field = match kind {
            "pid" => &mut self.pid,
            "net" => &mut self.net,
            "ipc" => &mut self.ipc,
            "uts" => &mut self.uts,
            "cgroup" => &mut self.cgroup,
            _ => return,
        };
        *field = source.into();
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn plan_accessors() {
        let mut p = NamespacePlan::default();
        assert_eq!(p.source("pid"), NsSource::NS_NEW);
        p.set("net", NsSource::NS_FD);
        p.set("pid", NsSource::NS_SANDBOX);
        assert_eq!(p.source("net"), NsSource::NS_FD);
        assert_eq!(p.source("pid"), NsSource::NS_SANDBOX);
        assert_eq!(p.source("ipc"), NsSource::NS_NEW);
    }
}
