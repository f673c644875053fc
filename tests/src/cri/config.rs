//! Kubelet-like pod and container configs for CRI v1.

use std::collections::HashMap;

use k8s_cri::v1::{
    Capability, ContainerConfig, ContainerMetadata, IdMapping, ImageSpec, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, MountPropagation, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, SecurityProfile, UserNamespace,
};

/// What varies between test pods.
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    /// `true`: network NODE (host network). `false`: network POD, which needs a CNI network that
    /// gives the pod an interface: start containerd with `ContainerdOpts::pod_network`.
    pub host_network: bool,
    /// Linux cgroup parent; use [`crate::Containerd::cgroup_parent`] so leak checks see it.
    pub cgroup_parent: String,
    pub annotations: HashMap<String, String>,
    pub labels: HashMap<String, String>,
    /// shareProcessNamespace: pid namespace POD for every container.
    pub share_process_namespace: bool,
    /// hostPID: pid namespace NODE (wins over `share_process_namespace`).
    pub host_pid: bool,
    /// hostIPC: ipc namespace NODE.
    pub host_ipc: bool,
    /// Pod-level sysctls (`securityContext.sysctls`).
    pub sysctls: HashMap<String, String>,
    /// The pod's log directory (the kubelet's `/var/log/pods/...`); empty: no container logs.
    pub log_directory: String,
    /// The sandbox may hold privileged containers.
    pub privileged: bool,
    /// `hostUsers: false`: a pod user namespace (mode POD) mapping container ids
    /// `0..len` to host ids `host..host+len`, for uids and gids alike.
    pub user_namespace: Option<IdRange>,
}

/// One id range of a pod user namespace, as the kubelet allocates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub host: u32,
    pub len: u32,
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
            share_process_namespace: false,
            host_pid: false,
            host_ipc: false,
            sysctls: HashMap::new(),
            log_directory: String::new(),
            privileged: false,
            user_namespace: None,
        }
    }

    /// Namespace options as the kubelet sets them: pid CONTAINER unless shareProcessNamespace
    /// (POD) or hostPID (NODE), ipc POD or NODE, network NODE or POD.
    pub fn namespace_options(&self) -> NamespaceOption {
        let pid = if self.host_pid {
            NamespaceMode::Node
        } else if self.share_process_namespace {
            NamespaceMode::Pod
        } else {
            NamespaceMode::Container
        };
        NamespaceOption {
            network: if self.host_network {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            } as i32,
            pid: pid as i32,
            ipc: if self.host_ipc {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            } as i32,
            userns_options: self.user_namespace.map(|r| {
                let map = vec![IdMapping {
                    host_id: r.host,
                    container_id: 0,
                    length: r.len,
                }];
                UserNamespace {
                    mode: NamespaceMode::Pod as i32,
                    uids: map.clone(),
                    gids: map,
                }
            }),
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
            log_directory: self.log_directory.clone(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespace_options()),
                    privileged: self.privileged,
                    ..Default::default()
                }),
                sysctls: self.sysctls.clone(),
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
    /// Volumes (CRI mounts: host path, propagation, read-only; see [`bind_mount`]).
    pub mounts: Vec<Mount>,
    /// securityContext.capabilities.add as the kubelet sends it, e.g. `NET_ADMIN`.
    pub add_capabilities: Vec<String>,
    /// securityContext.capabilities.drop, e.g. `ALL`.
    pub drop_capabilities: Vec<String>,
    /// securityContext.privileged (the pod must be privileged too).
    pub privileged: bool,
    /// securityContext.seccompProfile; `None`: none (unconfined, as containerd 1.6 defaults).
    pub seccomp: Option<SecurityProfile>,
    /// securityContext.runAsUser.
    pub run_as_user: Option<i64>,
    /// The log file, relative to the pod's `log_directory`.
    pub log_path: String,
}

/// A hostPath volume at `container_path` with `propagation`.
pub fn bind_mount(
    host_path: &std::path::Path,
    container_path: &str,
    readonly: bool,
    propagation: MountPropagation,
) -> Mount {
    Mount {
        container_path: container_path.to_owned(),
        host_path: host_path.display().to_string(),
        readonly,
        propagation: propagation as i32,
        ..Default::default()
    }
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
            drop_capabilities: Vec::new(),
            privileged: false,
            seccomp: None,
            run_as_user: None,
            log_path: String::new(),
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
            log_path: self.log_path.clone(),
            linux: Some(LinuxContainerConfig {
                resources: self.resources.clone(),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(pod.namespace_options()),
                    capabilities: (!self.add_capabilities.is_empty()
                        || !self.drop_capabilities.is_empty())
                    .then(|| Capability {
                        add_capabilities: self.add_capabilities.clone(),
                        drop_capabilities: self.drop_capabilities.clone(),
                        ..Default::default()
                    }),
                    privileged: self.privileged,
                    seccomp: self.seccomp.clone(),
                    run_as_user: self
                        .run_as_user
                        .map(|value| k8s_cri::v1::Int64Value { value }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }
}
