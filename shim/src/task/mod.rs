//! The containerd Task service (task v2, also served as v3).

mod create;
mod devices;
mod early_cgroup;
pub use early_cgroup::head::{
    begin as begin_cgroup_head_start, discard as discard_cgroup_head_start,
    plan as cgroup_head_plan, Plan as CgroupHeadPlan,
};
mod error;
pub use error::TaskError;
pub mod events;
mod exec;
pub mod exit_signal;
mod lifecycle;
mod namespaces;
pub(crate) mod options;
pub use options::config_path;
mod pod;
pub use pod::{
    abandon_early_head, begin_head_start, early_head_start, end_head_start, head_start_plan,
    EarlyHead, HeadPlan,
};
pub mod publish;
mod remap;
mod resources;
pub use resources::stats_any;
pub mod snapshot;
mod spawn;
pub mod state;
mod undo;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use containerd_shim_protos::api::*;
use containerd_shim_protos::shim_async::Task;
use containerd_shim_protos::ttrpc::r#async::TtrpcContext;
use containerd_shim_protos::ttrpc::Result as TtrpcResult;
use tokio::sync::Mutex;

use crate::config::RundConfig;
use crate::error::ShimError;
use crate::sandbox::Sandbox;
use events::Events;
use state::Container;

pub struct Service {
    config: std::sync::RwLock<Arc<RundConfig>>,
    pub(crate) events: Events,
    pub(crate) containers: Mutex<HashMap<String, Arc<Container>>>,
    /// Container ids whose Create is in flight.
    creating: std::sync::Mutex<HashSet<String>>,
    pub(crate) sandbox: std::sync::Mutex<pod::Slot>,
    pub(crate) exit: Arc<exit_signal::ExitSignal>,
    pub(crate) debug: bool,
    /// The node's cgroups (with the pool), made on first use from the config
    /// in force; the error says why if unusable.
    cgroups: std::sync::Mutex<Option<Arc<rund_cgroup::Cgroups>>>,
    /// The node's warm agents (per-node mode), set once when the pod is admitted.
    pub(crate) warm: std::sync::OnceLock<Arc<crate::sandbox::warm::WarmPool>>,
    /// Per-pod mode: the agent launched as this shim started (`pod::begin_head_start`).
    pub(crate) head_start: std::sync::OnceLock<crate::sandbox::head_start::HeadStart>,
    /// Per-pod mode: the sandbox id whose ids the head start leased, and
    /// the config it leased them under.
    pub(crate) head_lease: std::sync::OnceLock<(String, RundConfig)>,
    /// Per-pod mode: the pod's cgroup, begun as this shim started
    /// (`early_cgroup::head`).
    pub(crate) cgroup_head: std::sync::Mutex<Option<early_cgroup::head::Head>>,
    /// Per-node mode: the pod's record and its keeper.
    pub node: std::sync::OnceLock<snapshot::NodeLink>,
    /// The config path the first container's options named.
    config_in_force: std::sync::Mutex<Option<std::path::PathBuf>>,
}

impl Service {
    pub fn new(
        config: RundConfig,
        events: Events,
        exit: Arc<exit_signal::ExitSignal>,
        debug: bool,
    ) -> Self {
        crate::phase_layer::set_active(config.trace.phases_file.is_some());
        Service {
            cgroups: std::sync::Mutex::new(None),
            config: std::sync::RwLock::new(Arc::new(config)),
            events,
            containers: Mutex::new(HashMap::new()),
            creating: Default::default(),
            sandbox: Default::default(),
            exit,
            debug,
            warm: std::sync::OnceLock::new(),
            head_start: std::sync::OnceLock::new(),
            head_lease: std::sync::OnceLock::new(),
            cgroup_head: Default::default(),
            node: std::sync::OnceLock::new(),
            config_in_force: Default::default(),
        }
    }

    /// Kills the head start's agent unless a Create took it.
    pub(crate) fn discard_head_start(&self) {
        if let Some(head) = self.head_start.get() {
            head.discard();
        }
    }

    pub(crate) fn config(&self) -> Arc<RundConfig> {
        self.config.read().expect("config lock").clone()
    }

    /// Switches to the config named by the first container's runtime options.
    pub(crate) fn use_config(&self, config: RundConfig) {
        crate::phase_layer::set_active(config.trace.phases_file.is_some());
        let mut slot = self.config.write().expect("config lock");
        if slot.cgroup != config.cgroup {
            // The cgroups found with the old `[cgroup]` (a head start's) are not this config's.
            *self.cgroups.lock().expect("cgroups lock") = None;
        }
        *slot = Arc::new(config);
    }

    pub(crate) fn config_in_force(&self) -> Option<std::path::PathBuf> {
        self.config_in_force
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_config_in_force(&self, path: std::path::PathBuf) {
        *self
            .config_in_force
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(path);
    }

    /// The node's cgroup set-up, found once. Only success is kept: a transient
    /// failure (out of fds, say) must not break every later Create of this shim.
    pub(crate) fn cgroups(&self) -> Result<Arc<rund_cgroup::Cgroups>, ShimError> {
        let mut slot = self.cgroups.lock().expect("cgroups lock");
        if let Some(made) = slot.as_ref() {
            return Ok(made.clone());
        }
        let made = rund_cgroup::Cgroups::new(self.config().cgroup.clone())
            .map(Arc::new)
            .map_err(TaskError::CgroupsUnavailable)?;
        *slot = Some(made.clone());
        Ok(made)
    }

    /// Uses a cgroup set-up made elsewhere (the node's, shared by its pods).
    pub(crate) fn use_cgroups(&self, made: Arc<rund_cgroup::Cgroups>) {
        *self.cgroups.lock().expect("cgroups lock") = Some(made);
    }

    /// The running sandbox, if any.
    pub(crate) fn sandbox(&self) -> Option<Arc<Sandbox>> {
        match &*pod::lock(&self.sandbox) {
            pod::Slot::Ready(sb) => Some(sb.clone()),
            _ => None,
        }
    }

    /// Takes the sandbox out (to tear it down).
    pub(crate) fn take_sandbox(&self) -> Option<Arc<Sandbox>> {
        let mut slot = pod::lock(&self.sandbox);
        match std::mem::take(&mut *slot) {
            pod::Slot::Ready(sb) => Some(sb),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Reserves a container id for one Create; the guard frees it.
    pub(crate) async fn reserve(&self, id: &str) -> Result<Reservation<'_>, ShimError> {
        let exists = || TaskError::ContainerExists { id: id.into() }.into();
        if !self.lock_creating().insert(id.to_string()) {
            return Err(exists());
        }
        let r = Reservation {
            svc: self,
            id: id.to_string(),
        };
        if self.containers.lock().await.contains_key(id) {
            return Err(exists());
        }
        Ok(r)
    }

    fn lock_creating(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.creating.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) async fn container(&self, id: &str) -> Result<Arc<Container>, ShimError> {
        self.containers
            .lock()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| TaskError::ContainerNotFound { id: id.into() }.into())
    }
}

/// A container id reserved by a Create in flight.
pub(crate) struct Reservation<'a> {
    svc: &'a Service,
    id: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.svc.lock_creating().remove(&self.id);
    }
}

/// The ttrpc-facing handle (a newtype, as the trait is foreign).
pub struct TaskHandler(pub Arc<Service>);

#[async_trait]
impl Task for TaskHandler {
    async fn create(
        &self,
        _ctx: &TtrpcContext,
        req: CreateTaskRequest,
    ) -> TtrpcResult<CreateTaskResponse> {
        let id = req.id.clone();
        let r = create::create(&self.0, req).await;
        if let Err(e) = &r {
            tracing::error!(id, "create failed: {e}");
        }
        self.0.persist().await;
        Ok(r?)
    }

    async fn start(&self, _ctx: &TtrpcContext, req: StartRequest) -> TtrpcResult<StartResponse> {
        let r = lifecycle::start(&self.0, &req.id, &req.exec_id).await;
        self.0.persist().await;
        Ok(r?)
    }

    async fn delete(&self, _ctx: &TtrpcContext, req: DeleteRequest) -> TtrpcResult<DeleteResponse> {
        let r = lifecycle::delete(&self.0, &req.id, &req.exec_id).await;
        self.0.persist().await;
        Ok(r?)
    }

    async fn kill(&self, _ctx: &TtrpcContext, req: KillRequest) -> TtrpcResult<Empty> {
        lifecycle::kill(&self.0, &req.id, &req.exec_id, req.signal, req.all).await?;
        Ok(Empty::new())
    }

    async fn wait(&self, _ctx: &TtrpcContext, req: WaitRequest) -> TtrpcResult<WaitResponse> {
        Ok(lifecycle::wait(&self.0, &req.id, &req.exec_id).await?)
    }

    async fn state(&self, _ctx: &TtrpcContext, req: StateRequest) -> TtrpcResult<StateResponse> {
        Ok(lifecycle::state(&self.0, &req.id, &req.exec_id).await?)
    }

    async fn pids(&self, _ctx: &TtrpcContext, req: PidsRequest) -> TtrpcResult<PidsResponse> {
        Ok(lifecycle::pids(&self.0, &req.id).await?)
    }

    async fn connect(
        &self,
        _ctx: &TtrpcContext,
        req: ConnectRequest,
    ) -> TtrpcResult<ConnectResponse> {
        let task_pid = match self.0.container(&req.id).await {
            Ok(c) => c.init.pid(),
            Err(_) => 0,
        };
        Ok(ConnectResponse {
            shim_pid: std::process::id(),
            task_pid,
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..Default::default()
        })
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, _req: ShutdownRequest) -> TtrpcResult<Empty> {
        if self.0.containers.lock().await.is_empty() && self.0.lock_creating().is_empty() {
            if let Some(sb) = self.0.take_sandbox() {
                sb.teardown(sb.grace).await;
            }
            self.0.exit.signal();
        }
        Ok(Empty::new())
    }

    async fn exec(&self, _ctx: &TtrpcContext, req: ExecProcessRequest) -> TtrpcResult<Empty> {
        let r = exec::exec(&self.0, req).await;
        self.0.persist().await;
        r?;
        Ok(Empty::new())
    }

    async fn resize_pty(&self, _ctx: &TtrpcContext, req: ResizePtyRequest) -> TtrpcResult<Empty> {
        lifecycle::resize_pty(&self.0, &req.id, &req.exec_id, req.width, req.height).await?;
        Ok(Empty::new())
    }

    async fn close_io(&self, _ctx: &TtrpcContext, req: CloseIORequest) -> TtrpcResult<Empty> {
        let c = self.0.container(&req.id).await?;
        let p = c
            .process(&req.exec_id)
            .ok_or_else(|| TaskError::ProcessNotFound {
                id: req.id.clone(),
                exec_id: req.exec_id.clone(),
            })
            .map_err(ShimError::from)?;
        if req.stdin {
            p.close_stdin();
        }
        Ok(Empty::new())
    }

    async fn pause(&self, _ctx: &TtrpcContext, req: PauseRequest) -> TtrpcResult<Empty> {
        let r = resources::pause(&self.0, &req.id).await;
        self.0.persist().await;
        r?;
        Ok(Empty::new())
    }

    async fn resume(&self, _ctx: &TtrpcContext, req: ResumeRequest) -> TtrpcResult<Empty> {
        let r = resources::resume(&self.0, &req.id).await;
        self.0.persist().await;
        r?;
        Ok(Empty::new())
    }

    async fn checkpoint(
        &self,
        _ctx: &TtrpcContext,
        _req: CheckpointTaskRequest,
    ) -> TtrpcResult<Empty> {
        Err(ShimError::from(TaskError::Unsupported {
            what: "Checkpoint: no CRIU integration",
        })
        .into())
    }

    async fn update(&self, _ctx: &TtrpcContext, req: UpdateTaskRequest) -> TtrpcResult<Empty> {
        resources::update(&self.0, req).await?;
        Ok(Empty::new())
    }

    async fn stats(&self, _ctx: &TtrpcContext, req: StatsRequest) -> TtrpcResult<StatsResponse> {
        Ok(resources::stats(&self.0, &req.id).await?)
    }
}

/// The sandbox API's StartSandbox: the pod sandbox "container" (the agent),
/// created without task events.
pub async fn create_sandbox(
    svc: &Arc<Service>,
    req: CreateTaskRequest,
) -> Result<CreateTaskResponse, ShimError> {
    let r = create::create_with(svc, req, false).await;
    svc.persist().await;
    r
}

/// The sandbox API's ShutdownSandbox: the agent torn down, the sandbox's
/// cgroup given back, the entry gone.
pub async fn remove_sandbox(svc: &Arc<Service>, id: &str) -> Result<(), ShimError> {
    if let Some(sb) = svc.take_sandbox() {
        sb.teardown(sb.grace).await;
    }
    let c = svc.containers.lock().await.remove(id);
    svc.persist().await;
    if let Some(cg) = c.as_ref().and_then(|c| c.cgroup.as_ref()) {
        cg.destroy().await?;
    }
    Ok(())
}

/// How long teardown waits for one exit to be published.
const WATCHER_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Shim SIGTERM: tear the sandbox down (TERM, grace, KILL) and publish exits.
pub async fn teardown_all(svc: &Arc<Service>) {
    if let Some(sb) = svc.sandbox() {
        sb.teardown(sb.grace).await;
    }
    // Each started process's exit watcher publishes its exit as the agent
    // reports it: wait for every one (bounded, should one never end).
    let containers: Vec<_> = svc.containers.lock().await.values().cloned().collect();
    for c in &containers {
        for p in c.processes() {
            if p.started.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = tokio::time::timeout(WATCHER_LIMIT, p.wait_exit()).await;
            }
        }
        c.stop_oom_watch();
    }
    // Nothing runs any more: give back the cgroups and unmount the rootfs.
    for c in containers {
        if let Some(cg) = &c.cgroup {
            if let Err(e) = cg.destroy().await {
                tracing::warn!(id = %c.id, "cgroup: {e}");
            }
        }
        if c.rootfs_mounted {
            if let Err(e) = crate::rootfs::cleanup(&c.bundle) {
                tracing::warn!(id = %c.id, "{e}");
            }
        }
    }
}
