//! Kubelet-like pod and container configs for CRI v1.

use std::collections::HashMap;

use k8s_cri::v1::{
    Capability, ContainerConfig, ContainerMetadata, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata,
};

/// What varies between test pods.
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    /// `true`: network NODE (host network). `false`: network POD, which needs a CNI network that
    /// gives the pod an interface; the harness configures none.
    pub host_network: bool,
    /// Linux cgroup parent; use [`crate::Containerd::cgroup_parent`] so leak checks see it.
    pub cgroup_parent: String,
    pub annotations: HashMap<String, String>,
    pub labels: HashMap<String, String>,
}

impl PodSpec {
    /// A host-network pod named `name` under `cgroup_parent`.
    pub fn new(name: &str, cgroup_parent: &str) -> PodSpec {
        PodSpec {
            name: name.to_owned(),
            uid: format!("uid-{name}-{}", std::process::id()),
            namespace: "rund-test".to_owned(),
            host_network: true,
            cgroup_parent: cgroup_parent.to_owned(),
            annotations: HashMap::new(),
            labels: HashMap::new(),
        }
    }

    /// Namespace options as the kubelet sets them: pid CONTAINER (no shareProcessNamespace),
    /// ipc POD, network NODE or POD.
    pub fn namespace_options(&self) -> NamespaceOption {
        NamespaceOption {
            network: if self.host_network {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            } as i32,
            pid: NamespaceMode::Container as i32,
            ipc: NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    /// The PodSandboxConfig sent to RunPodSandbox and, again, to CreateContainer.
    pub fn config(&self) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            // A host-network pod shares the host's UTS namespace: no hostname to set.
            hostname: if self.host_network {
                String::new()
            } else {
                self.name.clone()
            },
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespace_options()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// What varies between test containers.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// `command` (entrypoint override); empty: the image's.
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub resources: Option<LinuxContainerResources>,
    /// Container annotations (the kubelet's: device plugin allocations).
    pub annotations: HashMap<String, String>,
    /// Volumes (CRI mounts: host path, propagation, read-only).
    pub mounts: Vec<k8s_cri::v1::Mount>,
    /// securityContext.capabilities.add as the kubelet sends it, e.g. `NET_ADMIN`.
    pub add_capabilities: Vec<String>,
}

impl ContainerSpec {
    /// Container `name` from `image` running `command`.
    pub fn new(name: &str, image: &str, command: &[&str]) -> ContainerSpec {
        ContainerSpec {
            name: name.to_owned(),
            image: image.to_owned(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            args: Vec::new(),
            env: Vec::new(),
            resources: None,
            annotations: HashMap::new(),
            mounts: Vec::new(),
            add_capabilities: Vec::new(),
        }
    }

    /// The ContainerConfig, with the pod's namespace options as the kubelet copies them.
    pub fn config(&self, pod: &PodSpec) -> ContainerConfig {
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: self.name.clone(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: self.command.clone(),
            args: self.args.clone(),
            envs: self
                .env
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            annotations: self.annotations.clone(),
            mounts: self.mounts.clone(),
            linux: Some(LinuxContainerConfig {
                resources: self.resources.clone(),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(pod.namespace_options()),
                    capabilities: (!self.add_capabilities.is_empty()).then(|| Capability {
                        add_capabilities: self.add_capabilities.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }
}
