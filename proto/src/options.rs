//! Options the shim decides for a process and the agent carries out.
//! They travel as JSON in `CreateProcessRequest.options_json`.

use serde::{Deserialize, Serialize};

/// How one namespace of a container is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NsSource {
    /// A fresh namespace of this type, just for the container.
    #[default]
    New,
    /// The sandbox's (the agent's own) namespace.
    Sandbox,
    /// Joined through an nsfs fd sent on the side channel (`FdKind::Namespace`).
    Fd,
}

/// Namespace plan of a container. The mount namespace is always new.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacePlan {
    pub pid: NsSource,
    pub net: NsSource,
    pub ipc: NsSource,
    pub uts: NsSource,
    pub cgroup: NsSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerOptions {
    pub namespaces: NamespacePlan,
    /// Run the tini-like init as PID 1 and the workload as its child.
    pub use_init: bool,
    /// The sandbox runs in a user namespace: device nodes are bind-mounted,
    /// never created with mknod.
    pub userns: bool,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        ContainerOptions {
            namespaces: NamespacePlan::default(),
            use_init: true,
            userns: false,
        }
    }
}
