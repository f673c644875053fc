//! Pause, Resume, Stats, Update and OOM: the cgroup side of a container.

use std::sync::Arc;

use containerd_shim_protos::api::{StatsResponse, UpdateTaskRequest};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use oci_spec::runtime::LinuxResources;

use super::state::Container;
use super::Service;
use super::TaskError;
use crate::cgroups::ContainerCgroup;
use crate::error::Result;

fn cgroup_of(c: &Container) -> Result<&ContainerCgroup> {
    c.cgroup
        .as_ref()
        .ok_or_else(|| TaskError::NoCgroup { id: c.id.clone() }.into())
}

pub async fn pause(svc: &Arc<Service>, id: &str) -> Result<()> {
    let c = svc.container(id).await?;
    if c.init.exit().is_some() {
        return Err(TaskError::NotRunning { id: id.into() }.into());
    }
    cgroup_of(&c)?.freeze().await?;
    c.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    svc.events.paused(id).await;
    Ok(())
}

pub async fn resume(svc: &Arc<Service>, id: &str) -> Result<()> {
    let c = svc.container(id).await?;
    cgroup_of(&c)?.thaw().await?;
    c.paused.store(false, std::sync::atomic::Ordering::SeqCst);
    svc.events.resumed(id).await;
    Ok(())
}

pub async fn stats(svc: &Arc<Service>, id: &str) -> Result<StatsResponse> {
    Ok(StatsResponse {
        stats: Some(stats_any(svc, id).await?).into(),
        ..Default::default()
    })
}

/// A container's cgroup stats as containerd's metrics `Any`.
pub async fn stats_any(svc: &Arc<Service>, id: &str) -> Result<Any> {
    let c = svc.container(id).await?;
    let s = cgroup_of(&c)?.stats().await?;
    Ok(crate::cgroups::metrics::to_any(&s)?)
}

pub async fn update(svc: &Arc<Service>, req: UpdateTaskRequest) -> Result<()> {
    let c = svc.container(&req.id).await?;
    let any = req.resources.as_ref().ok_or(TaskError::NoResources)?;
    let res: LinuxResources =
        serde_json::from_slice(&any.value).map_err(TaskError::MalformedResources)?;
    Ok(cgroup_of(&c)?.update(res).await?)
}

/// Registers for OOM notifications of the container's cgroup before its
/// process starts, so an OOM right at the start is counted (v1's eventfd
/// sees only OOMs after registration). [`watch_oom`] publishes them.
pub fn arm_oom(c: &Container) {
    let Some(cg) = c.cgroup.as_ref() else { return };
    let armed = cg
        .oom_watcher()
        .map_err(|e| e.to_string())
        .and_then(|w| crate::io::async_fd_of(w).map_err(|e| e.to_string()));
    match armed {
        Ok(fd) => *c.oom.lock().expect("oom lock") = Some(Arc::new(fd)),
        Err(e) => tracing::warn!(id = %c.id, "no OOM notifications: {e}"),
    }
}

/// Publishes TaskOOM for each OOM kill in the container's cgroup (armed by
/// [`arm_oom`]). The exit watcher drains pending OOM events under the same
/// lock before it publishes TaskExit, so an OOM always comes first.
pub fn watch_oom(svc: Arc<Service>, c: Arc<Container>) {
    let Some(fd) = c.oom.lock().expect("oom lock").clone() else {
        return;
    };
    let owner = c.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable().await else {
                return;
            };
            guard.clear_ready();
            drop(guard);
            if !drain_oom(&svc, &c).await {
                return;
            }
        }
    });
    *owner.oom_task.lock().expect("oom lock") = Some(task.abort_handle());
}

/// Publishes any pending OOM events; false once the cgroup is gone.
pub async fn drain_oom(svc: &Arc<Service>, c: &Arc<Container>) -> bool {
    let _order = c.oom_order.lock().await;
    let fd = c.oom.lock().expect("oom lock").clone();
    let Some(fd) = fd else { return false };
    match fd.get_ref().read_events() {
        Ok(0) => true,
        Ok(_) => {
            svc.events.oom(&c.id).await;
            true
        }
        Err(_) => false,
    }
}
