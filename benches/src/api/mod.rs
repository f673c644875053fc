//! containerd's client API (gRPC), the way the CRI plugin's callers, nerdctl
//! and containerd's own Go client reach it: one long-lived connection and
//! no process per operation. The `ctr` measures pay a Go process start per
//! operation on top; this client shows the runtimes without it.

mod template;
#[cfg(test)]
mod tests;
mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::ctr::Ctr;
use crate::runtime::Runtime;
pub use template::Template;
use wire::{
    CreateContainerRequest, CreateTaskRequest, DeleteContainerRequest, Ignored, KillRequest,
    TaskRequest, WaitResponse,
};

const CONTAINERS: &str = "/containerd.services.containers.v1.Containers/";
const TASKS: &str = "/containerd.services.tasks.v1.Tasks/";

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("containerd API: {0}")]
    Connect(String),
    #[error("container template: {0}")]
    Template(String),
    #[error("{method}: {code:?}: {message}")]
    Call {
        method: String,
        code: tonic::Code,
        message: String,
    },
    #[error("{method} timed out after {secs} s")]
    Timeout { method: String, secs: u64 },
    #[error("no template for runtime {0}")]
    NoTemplate(String),
    #[error("run --rm: the task exited with status {status}")]
    Exit { status: u32 },
}

/// A blocking client: each call runs on the client's own runtime, so many
/// bench threads share one connection at once.
pub struct Api {
    rt: tokio::runtime::Runtime,
    channel: Channel,
    namespace: MetadataValue<Ascii>,
    templates: HashMap<Runtime, Template>,
    timeout: Duration,
}

impl Api {
    /// Connects to `socket` and makes one template container per runtime
    /// with `ctr` (removed again at once).
    pub fn connect(
        socket: &Path,
        ctr: &Ctr,
        rootfs: &Path,
        rts: &[Runtime],
        timeout: Duration,
    ) -> Result<Api, ApiError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("api-client")
            .enable_all()
            .build()
            .map_err(|e| ApiError::Connect(format!("tokio runtime: {e}")))?;
        let channel = rt
            .block_on(rund_tests::grpc::unix_channel(socket.to_path_buf()))
            .map_err(|e| ApiError::Connect(format!("connect: {e}")))?;
        let namespace = ctr
            .namespace()
            .parse()
            .map_err(|e| ApiError::Connect(format!("namespace as metadata: {e}")))?;
        let mut templates = HashMap::new();
        for r in rts {
            let id = format!("api-template-{}", r.kind.tag());
            let _ = ctr.remove_everything(&id);
            let mut args = vec!["container".to_string(), "create".into()];
            args.extend(r.ctr_flags());
            args.extend(["--rootfs".into(), rootfs.display().to_string(), id.clone()]);
            args.push("/bin/true".into());
            let made = ctr
                .run(&args)
                .and_then(|_| ctr.run(&["container", "info", &id]));
            let _ = ctr.run(&["container", "rm", &id]);
            let info = made.map_err(|e| ApiError::Template(e.to_string()))?;
            templates.insert(r.clone(), Template::from_info(&info, ctr.namespace())?);
        }
        Ok(Api {
            rt,
            channel,
            namespace,
            templates,
            timeout,
        })
    }

    fn block<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        self.rt
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
            .unwrap_or_else(|_| {
                Err(ApiError::Timeout {
                    method: what.into(),
                    secs: self.timeout.as_secs(),
                })
            })
    }

    async fn call<Req, Resp>(&self, service: &str, method: &str, req: Req) -> Result<Resp, ApiError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let name = format!("{service}{method}");
        let fail = |code, message: String| ApiError::Call {
            method: name.trim_start_matches("/containerd.services.").into(),
            code,
            message,
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| fail(tonic::Code::Unavailable, e.to_string()))?;
        let mut request = tonic::Request::new(req);
        request
            .metadata_mut()
            .insert("containerd-namespace", self.namespace.clone());
        let path = PathAndQuery::try_from(name.clone())
            .map_err(|e| fail(tonic::Code::Internal, e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::new();
        grpc.unary(request, path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| fail(s.code(), s.message().to_string()))
    }

    async fn create(&self, rt: &Runtime, id: &str, argv: &[&str]) -> Result<(), ApiError> {
        let t = self
            .templates
            .get(rt)
            .ok_or_else(|| ApiError::NoTemplate(rt.kind.label().into()))?;
        let req = CreateContainerRequest {
            container: Some(t.container(id, argv)?),
        };
        self.call::<_, Ignored>(CONTAINERS, "Create", req).await?;
        let task = CreateTaskRequest {
            container_id: id.into(),
        };
        self.call::<_, Ignored>(TASKS, "Create", task).await?;
        Ok(())
    }

    fn task(id: &str) -> TaskRequest {
        TaskRequest {
            container_id: id.into(),
        }
    }

    /// As `ctr run -d --null-io`: returns once the task has started.
    pub fn run_detached(&self, rt: &Runtime, id: &str, argv: &[&str]) -> Result<(), ApiError> {
        self.block("run -d", async {
            self.create(rt, id, argv).await?;
            self.call::<_, Ignored>(TASKS, "Start", Self::task(id))
                .await?;
            Ok(())
        })
    }

    /// As `ctr run --rm`: start, wait for the exit, delete task and
    /// container. A task that exits non-zero is an error.
    pub fn run_rm(&self, rt: &Runtime, id: &str, argv: &[&str]) -> Result<(), ApiError> {
        self.block("run --rm", async {
            self.create(rt, id, argv).await?;
            self.call::<_, Ignored>(TASKS, "Start", Self::task(id))
                .await?;
            // A task stays until it is deleted, so a Wait sent after its
            // exit still gets the status.
            let w: WaitResponse = self.call(TASKS, "Wait", Self::task(id)).await?;
            self.call::<_, Ignored>(TASKS, "Delete", Self::task(id))
                .await?;
            let del = DeleteContainerRequest { id: id.into() };
            self.call::<_, Ignored>(CONTAINERS, "Delete", del).await?;
            match w.exit_status {
                0 => Ok(()),
                status => Err(ApiError::Exit { status }),
            }
        })
    }

    /// As `ctr task delete --force` then `ctr container rm`.
    pub fn remove(&self, id: &str) -> Result<(), ApiError> {
        self.block("remove", async {
            let kill = KillRequest {
                container_id: id.into(),
                signal: libc::SIGKILL as u32,
                all: true,
            };
            match self.call::<_, Ignored>(TASKS, "Kill", kill).await {
                // Already exited: nothing to kill.
                Err(ApiError::Call {
                    code: tonic::Code::NotFound,
                    ..
                }) => {}
                r => r.map(drop)?,
            }
            self.call::<_, WaitResponse>(TASKS, "Wait", Self::task(id))
                .await?;
            self.call::<_, Ignored>(TASKS, "Delete", Self::task(id))
                .await?;
            let del = DeleteContainerRequest { id: id.into() };
            self.call::<_, Ignored>(CONTAINERS, "Delete", del).await?;
            Ok(())
        })
    }
}
