//! containerd 2.x's sandbox API (`containerd.runtime.sandbox.v1.Sandbox`,
//! used with a runtime's `sandboxer = "shim"`). rund's agent already is the
//! pod's sandbox, so a pod on containerd 2.x needs no pause container and no
//! pause image: CreateSandbox turns the CRI pod config into the sandbox spec
//! containerd would have given a pause container, StartSandbox starts the
//! agent through the same Create pipeline, and containers then join the pod
//! through the task API as usual.

mod error;
mod podconfig;
mod spec;

pub use error::SandboxerError;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use containerd_shim_protos::api::CreateTaskRequest;
use containerd_shim_protos::sandbox_api::*;
use containerd_shim_protos::sandbox_async::Sandbox as SandboxService;
use containerd_shim_protos::ttrpc::r#async::TtrpcContext;
use containerd_shim_protos::ttrpc::{self, Result as TtrpcResult};
use containerd_shim_protos::types::platform::Platform;

use crate::clock::now_ns;
use crate::error::ShimError;
use crate::task::events::timestamp_ns;
use crate::task::Service;

/// What CreateSandbox prepared and StartSandbox started.
#[derive(Default)]
struct Pod {
    id: String,
    bundle: PathBuf,
    created_ns: i64,
}

pub struct SandboxHandler {
    svc: Arc<Service>,
    pod: Mutex<Option<Pod>>,
}

impl SandboxHandler {
    pub fn new(svc: Arc<Service>) -> Self {
        SandboxHandler {
            svc,
            pod: Mutex::new(None),
        }
    }

    fn pod_id(&self, id: &str) -> Result<(String, PathBuf, i64), ShimError> {
        let g = self.pod.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(p) if p.id == id => Ok((p.id.clone(), p.bundle.clone(), p.created_ns)),
            _ => Err(SandboxerError::Unknown { id: id.into() }.into()),
        }
    }

    fn sandbox(&self, id: &str) -> Result<Arc<crate::sandbox::Sandbox>, ShimError> {
        self.pod_id(id)?;
        self.svc
            .sandbox()
            .ok_or_else(|| SandboxerError::NotRunning { id: id.into() }.into())
    }
}

const POD_CONFIG: &str = "runtime.v1.PodSandboxConfig";

/// Writes the sandbox spec built from the CRI pod config into the bundle.
fn write_spec(req: &CreateSandboxRequest) -> Result<PathBuf, SandboxerError> {
    let cfg = match req.options.as_ref() {
        Some(a) if a.type_url.ends_with(POD_CONFIG) => {
            podconfig::decode(&a.value).map_err(SandboxerError::PodConfig)?
        }
        Some(a) if !a.type_url.is_empty() => {
            return Err(SandboxerError::OptionsType {
                type_url: a.type_url.clone(),
                wanted: POD_CONFIG,
            })
        }
        _ => Default::default(),
    };
    let spec = spec::build(&cfg, &req.sandbox_id, &req.netns_path).map_err(SandboxerError::Spec)?;
    let bundle = PathBuf::from(&req.bundle_path);
    let text = serde_json::to_vec_pretty(&spec).map_err(SandboxerError::Encode)?;
    let path = bundle.join("config.json");
    std::fs::write(&path, text).map_err(|source| SandboxerError::BundleWrite { path, source })?;
    Ok(bundle)
}

#[async_trait]
impl SandboxService for SandboxHandler {
    async fn create_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: CreateSandboxRequest,
    ) -> TtrpcResult<CreateSandboxResponse> {
        let id = req.sandbox_id.clone();
        let bundle = write_spec(&req).map_err(ShimError::from)?;
        let mut g = self.pod.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(ShimError::from(SandboxerError::Exists { id }).into());
        }
        *g = Some(Pod {
            id,
            bundle,
            created_ns: now_ns(),
        });
        Ok(CreateSandboxResponse::default())
    }

    async fn start_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: StartSandboxRequest,
    ) -> TtrpcResult<StartSandboxResponse> {
        let (id, bundle, created) = self.pod_id(&req.sandbox_id)?;
        let create = CreateTaskRequest {
            id: id.clone(),
            bundle: bundle.display().to_string(),
            ..Default::default()
        };
        // The pod sandbox "container": the agent itself, no task events
        // (containerd publishes the sandbox's own).
        let resp = crate::task::create_sandbox(&self.svc, create).await?;
        Ok(StartSandboxResponse {
            pid: resp.pid,
            created_at: Some(timestamp_ns(created)).into(),
            ..Default::default()
        })
    }

    async fn platform(
        &self,
        _ctx: &TtrpcContext,
        req: PlatformRequest,
    ) -> TtrpcResult<PlatformResponse> {
        self.pod_id(&req.sandbox_id)?;
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Ok(PlatformResponse {
            platform: Some(Platform {
                os: "linux".into(),
                architecture: arch.into(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
    }

    async fn stop_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: StopSandboxRequest,
    ) -> TtrpcResult<StopSandboxResponse> {
        self.pod_id(&req.sandbox_id)?;
        if let Some(sb) = self.svc.sandbox() {
            // CRI stops the containers first; what is left gets TERM, the
            // timeout, then KILL.
            let grace = Duration::from_secs(req.timeout_secs.into());
            sb.teardown(if req.timeout_secs == 0 {
                sb.grace
            } else {
                grace
            })
            .await;
        }
        Ok(StopSandboxResponse::default())
    }

    async fn wait_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: WaitSandboxRequest,
    ) -> TtrpcResult<WaitSandboxResponse> {
        let sb = self.sandbox(&req.sandbox_id)?;
        let (status, at) = sb.wait_exit().await;
        Ok(WaitSandboxResponse {
            exit_status: status,
            exited_at: Some(timestamp_ns(at)).into(),
            ..Default::default()
        })
    }

    async fn sandbox_status(
        &self,
        _ctx: &TtrpcContext,
        req: SandboxStatusRequest,
    ) -> TtrpcResult<SandboxStatusResponse> {
        let (id, bundle, created) = self.pod_id(&req.sandbox_id)?;
        let sb = self.svc.sandbox();
        let exited = sb.as_ref().and_then(|s| s.exited());
        let state = match (&sb, exited) {
            (Some(_), None) => "SANDBOX_READY",
            _ => "SANDBOX_NOTREADY",
        };
        let pid = sb.as_ref().map(|s| s.pid() as u32).unwrap_or(0);
        let info = if req.verbose {
            verbose_info(pid, &bundle)
        } else {
            Default::default()
        };
        Ok(SandboxStatusResponse {
            sandbox_id: id,
            pid,
            state: state.into(),
            info,
            created_at: Some(timestamp_ns(created)).into(),
            exited_at: exited.map(|(_, at)| timestamp_ns(at)).into(),
            ..Default::default()
        })
    }

    async fn ping_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: PingRequest,
    ) -> TtrpcResult<PingResponse> {
        let sb = self.sandbox(&req.sandbox_id)?;
        if sb.exited().is_some() {
            return Err(ShimError::from(SandboxerError::Exited { id: req.sandbox_id }).into());
        }
        Ok(PingResponse::default())
    }

    async fn shutdown_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: ShutdownSandboxRequest,
    ) -> TtrpcResult<ShutdownSandboxResponse> {
        let (id, _, _) = self.pod_id(&req.sandbox_id)?;
        crate::task::remove_sandbox(&self.svc, &id).await?;
        self.pod.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.svc.exit.signal();
        Ok(ShutdownSandboxResponse::default())
    }

    async fn sandbox_metrics(
        &self,
        _ctx: &TtrpcContext,
        req: SandboxMetricsRequest,
    ) -> TtrpcResult<SandboxMetricsResponse> {
        let (id, _, _) = self.pod_id(&req.sandbox_id)?;
        let stats = crate::task::stats_any(&self.svc, &id).await?;
        let mut resp = SandboxMetricsResponse::default();
        let m = resp.metrics.mut_or_insert_default();
        m.timestamp = Some(timestamp_ns(now_ns())).into();
        m.id = id;
        m.data = Some(stats).into();
        Ok(resp)
    }
}

/// CRI's verbose PodSandboxStatus info, shaped like containerd's own for a
/// pause sandbox (`info` holds a JSON document): what `crictl inspectp` shows.
fn verbose_info(pid: u32, bundle: &std::path::Path) -> std::collections::HashMap<String, String> {
    let spec = std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    let doc = serde_json::json!({
        "pid": pid,
        "runtimeType": crate::cli::install::snippet::RUNTIME_TYPE,
        "sandboxer": "shim",
        "bundle": bundle.display().to_string(),
        "runtimeSpec": spec,
    });
    [("info".to_string(), doc.to_string())].into()
}

/// The service map to register next to the task service.
pub fn service(svc: Arc<Service>) -> std::collections::HashMap<String, ttrpc::r#async::Service> {
    containerd_shim_protos::sandbox_async::create_sandbox(Arc::new(SandboxHandler::new(svc)))
}
