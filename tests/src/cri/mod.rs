//! A blocking CRI v1 client over containerd's unix socket, for tests written as plain `#[test]`.

mod config;
mod conform;
pub mod sandboxer;

use std::path::{Path, PathBuf};

use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerStats, ContainerStatsRequest, ContainerStatus, ContainerStatusRequest,
    CreateContainerRequest, ExecSyncRequest, ExecSyncResponse, ImageSpec, ImageStatusRequest,
    ListContainersRequest, ListPodSandboxRequest, PodSandbox, PodSandboxStatus,
    PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest,
    StartContainerRequest, StopContainerRequest, StopPodSandboxRequest, VersionRequest,
    VersionResponse,
};
use tonic::transport::Channel;

pub use config::{bind_mount, ContainerSpec, IdRange, PodSpec};
pub use conform::{CriFixture, Exec, Handler, SharedDir};
pub use k8s_cri::v1 as api;

/// CRI call failures.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("connect to {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("CRI {call}: {status}")]
    Call {
        call: &'static str,
        #[source]
        status: tonic::Status,
    },
    #[error("CRI {call}: empty response field {field}")]
    Empty {
        call: &'static str,
        field: &'static str,
    },
}

impl CriError {
    /// The gRPC status, for tests that expect a specific failure.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            CriError::Call { status, .. } => Some(status),
            _ => None,
        }
    }
}

pub type CriResult<T> = Result<T, CriError>;

/// A connected client. Each call blocks on a private current-thread runtime.
pub struct CriClient {
    rt: tokio::runtime::Runtime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CriClient")
    }
}

macro_rules! call {
    ($self:ident, $client:ident, $method:ident, $name:literal, $req:expr) => {{
        let mut c = $self.$client.clone();
        $self
            .rt
            .block_on(async move { c.$method($req).await })
            .map(|r| r.into_inner())
            .map_err(|status| CriError::Call {
                call: $name,
                status,
            })
    }};
}

impl CriClient {
    /// Connect to containerd's gRPC socket (CRI is served on the same socket).
    pub fn connect(socket: &Path) -> CriResult<CriClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let path = socket.to_path_buf();
        let channel = rt
            .block_on(crate::grpc::unix_channel(path.clone()))
            .map_err(|source| CriError::Connect { path, source })?;
        Ok(CriClient {
            rt,
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    pub fn version(&self) -> CriResult<VersionResponse> {
        call!(self, runtime, version, "Version", VersionRequest::default())
    }

    /// Whether the image is known to CRI (e.g. after `ctr -n k8s.io images import`).
    pub fn image_present(&self, image: &str) -> CriResult<bool> {
        let req = ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            verbose: false,
        };
        Ok(call!(self, images, image_status, "ImageStatus", req)?
            .image
            .is_some())
    }

    /// RunPodSandbox with `runtime_handler` (`"rund"`, `"runc"`); returns the sandbox id.
    pub fn run_pod_sandbox(&self, pod: &PodSpec, runtime_handler: &str) -> CriResult<String> {
        let req = RunPodSandboxRequest {
            config: Some(pod.config()),
            runtime_handler: runtime_handler.to_owned(),
        };
        Ok(call!(self, runtime, run_pod_sandbox, "RunPodSandbox", req)?.pod_sandbox_id)
    }

    pub fn pod_sandbox_status(&self, pod_id: &str) -> CriResult<PodSandboxStatus> {
        let req = PodSandboxStatusRequest {
            pod_sandbox_id: pod_id.to_owned(),
            verbose: false,
        };
        call!(self, runtime, pod_sandbox_status, "PodSandboxStatus", req)?
            .status
            .ok_or(CriError::Empty {
                call: "PodSandboxStatus",
                field: "status",
            })
    }

    /// Verbose PodSandboxStatus: the status and the runtime's `info` map.
    pub fn pod_sandbox_status_verbose(
        &self,
        pod_id: &str,
    ) -> CriResult<(PodSandboxStatus, std::collections::HashMap<String, String>)> {
        let req = PodSandboxStatusRequest {
            pod_sandbox_id: pod_id.to_owned(),
            verbose: true,
        };
        let r = call!(self, runtime, pod_sandbox_status, "PodSandboxStatus", req)?;
        let status = r.status.ok_or(CriError::Empty {
            call: "PodSandboxStatus",
            field: "status",
        })?;
        Ok((status, r.info))
    }

    pub fn list_pod_sandboxes(&self) -> CriResult<Vec<PodSandbox>> {
        let req = ListPodSandboxRequest::default();
        Ok(call!(self, runtime, list_pod_sandbox, "ListPodSandbox", req)?.items)
    }

    /// CreateContainer in `pod_id`; returns the container id.
    pub fn create_container(
        &self,
        pod_id: &str,
        container: &ContainerSpec,
        pod: &PodSpec,
    ) -> CriResult<String> {
        let req = CreateContainerRequest {
            pod_sandbox_id: pod_id.to_owned(),
            config: Some(container.config(pod)),
            sandbox_config: Some(pod.config()),
        };
        Ok(call!(self, runtime, create_container, "CreateContainer", req)?.container_id)
    }

    pub fn start_container(&self, id: &str) -> CriResult<()> {
        let req = StartContainerRequest {
            container_id: id.to_owned(),
        };
        call!(self, runtime, start_container, "StartContainer", req).map(drop)
    }

    /// Create then start; returns the container id.
    pub fn create_and_start(
        &self,
        pod_id: &str,
        container: &ContainerSpec,
        pod: &PodSpec,
    ) -> CriResult<String> {
        let id = self.create_container(pod_id, container, pod)?;
        self.start_container(&id)?;
        Ok(id)
    }

    /// ExecSync `cmd` with a timeout in seconds (0: none).
    pub fn exec_sync(
        &self,
        id: &str,
        cmd: &[&str],
        timeout_secs: i64,
    ) -> CriResult<ExecSyncResponse> {
        let req = ExecSyncRequest {
            container_id: id.to_owned(),
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            timeout: timeout_secs,
        };
        call!(self, runtime, exec_sync, "ExecSync", req)
    }

    pub fn container_stats(&self, id: &str) -> CriResult<ContainerStats> {
        let req = ContainerStatsRequest {
            container_id: id.to_owned(),
        };
        call!(self, runtime, container_stats, "ContainerStats", req)?
            .stats
            .ok_or(CriError::Empty {
                call: "ContainerStats",
                field: "stats",
            })
    }

    pub fn container_status(&self, id: &str) -> CriResult<ContainerStatus> {
        let req = ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        call!(self, runtime, container_status, "ContainerStatus", req)?
            .status
            .ok_or(CriError::Empty {
                call: "ContainerStatus",
                field: "status",
            })
    }

    /// Whether CRI reports `id` exited within `limit`. CRI takes a task's exit from its
    /// event stream, after `ctr events` may already have shown it; the kubelet removes only
    /// containers CRI reports exited.
    pub fn wait_exited(&self, id: &str, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let st = self.container_status(id);
            if st.is_ok_and(|s| s.state == api::ContainerState::ContainerExited as i32) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Ids of the containers (all states), optionally only those of `pod_id`.
    pub fn list_containers(&self, pod_id: Option<&str>) -> CriResult<Vec<String>> {
        let req = ListContainersRequest { filter: None };
        let items = call!(self, runtime, list_containers, "ListContainers", req)?.containers;
        Ok(items
            .into_iter()
            .filter(|c| pod_id.is_none_or(|p| c.pod_sandbox_id == p))
            .map(|c| c.id)
            .collect())
    }

    /// StopContainer: stop signal, up to `timeout_secs`, then SIGKILL.
    pub fn stop_container(&self, id: &str, timeout_secs: i64) -> CriResult<()> {
        let req = StopContainerRequest {
            container_id: id.to_owned(),
            timeout: timeout_secs,
        };
        call!(self, runtime, stop_container, "StopContainer", req).map(drop)
    }

    pub fn remove_container(&self, id: &str) -> CriResult<()> {
        let req = RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        call!(self, runtime, remove_container, "RemoveContainer", req).map(drop)
    }

    pub fn stop_pod_sandbox(&self, pod_id: &str) -> CriResult<()> {
        let req = StopPodSandboxRequest {
            pod_sandbox_id: pod_id.to_owned(),
        };
        call!(self, runtime, stop_pod_sandbox, "StopPodSandbox", req).map(drop)
    }

    pub fn remove_pod_sandbox(&self, pod_id: &str) -> CriResult<()> {
        let req = RemovePodSandboxRequest {
            pod_sandbox_id: pod_id.to_owned(),
        };
        call!(self, runtime, remove_pod_sandbox, "RemovePodSandbox", req).map(drop)
    }

    /// Best effort tear-down of a pod and all its containers (for clean-up paths).
    pub fn remove_pod(&self, pod_id: &str) {
        for c in self.list_containers(Some(pod_id)).unwrap_or_default() {
            let _ = self.stop_container(&c, 0);
            let _ = self.remove_container(&c);
        }
        let _ = self.stop_pod_sandbox(pod_id);
        let _ = self.remove_pod_sandbox(pod_id);
    }
}

impl crate::containerd::Containerd {
    /// A CRI client on this containerd (start it with `ContainerdOpts::cri`), after importing the
    /// busybox image (also the sandbox image) into `k8s.io` and waiting until CRI sees it.
    pub fn cri_client(&self) -> crate::Result<CriClient> {
        let image = self.import_busybox_image(crate::containerd::K8S_NAMESPACE)?;
        let client = CriClient::connect(self.address()).map_err(|e| crate::Error::Parse {
            cmd: "CRI connect".into(),
            detail: e.to_string(),
        })?;
        // CRI learns about imported images from containerd's events, asynchronously.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let seen = client.image_present(image);
            if matches!(seen, Ok(true)) {
                return Ok(client);
            }
            if std::time::Instant::now() >= deadline {
                return Err(crate::Error::WaitTimeout {
                    what: format!("CRI to see image {image}"),
                    secs: 30,
                    last: format!("{seen:?}"),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
