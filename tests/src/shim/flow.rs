//! Short-hands for the Task calls the direct tests make over and over.

use std::time::Duration;

use containerd_shim_protos::api::{
    CreateTaskResponse, DeleteRequest, DeleteResponse, KillRequest, StartRequest, StartResponse,
    StateRequest, StateResponse, WaitRequest, WaitResponse,
};
use containerd_shim_protos::ttrpc;

use super::events::Recorded;
use super::server::ctx;
use super::Direct;

/// How long the flows wait for an event: a hang guard, not a timing assertion.
pub const EVENT_GUARD: Duration = Duration::from_secs(20);

impl Direct {
    /// Create with this bundle's config.json, no rootfs mounts, empty stdio.
    pub async fn create(&self) -> ttrpc::Result<CreateTaskResponse> {
        self.shim.task.create(ctx(), &self.create_request()).await
    }

    /// Runs `args` as exec `exec_id` to its end, deletes it, and returns its exit status.
    pub async fn exec_to_end(&self, exec_id: &str, args: &[&str]) -> ttrpc::Result<u32> {
        let req = super::exec_request(&self.bundle.id, exec_id, &super::exec_process(args));
        self.shim.task.exec(ctx(), &req).await?;
        self.start_process(exec_id).await?;
        let status = self.wait_process(exec_id).await?.exit_status;
        self.delete_process(exec_id).await?;
        Ok(status)
    }

    /// Start the init (`exec_id` "") or an exec.
    pub async fn start_process(&self, exec_id: &str) -> ttrpc::Result<StartResponse> {
        let req = StartRequest {
            id: self.bundle.id.clone(),
            exec_id: exec_id.to_string(),
            ..Default::default()
        };
        self.shim.task.start(ctx(), &req).await
    }

    /// Wait for the init or an exec (bounded by the hang guard).
    pub async fn wait_process(&self, exec_id: &str) -> ttrpc::Result<WaitResponse> {
        let req = WaitRequest {
            id: self.bundle.id.clone(),
            exec_id: exec_id.to_string(),
            ..Default::default()
        };
        self.shim.task.wait(ctx(), &req).await
    }

    /// Signal the init or an exec.
    pub async fn kill_process(&self, exec_id: &str, signal: u32) -> ttrpc::Result<()> {
        let req = KillRequest {
            id: self.bundle.id.clone(),
            exec_id: exec_id.to_string(),
            signal,
            all: false,
            ..Default::default()
        };
        self.shim.task.kill(ctx(), &req).await.map(|_| ())
    }

    /// Delete the container (`exec_id` "") or an exec.
    pub async fn delete_process(&self, exec_id: &str) -> ttrpc::Result<DeleteResponse> {
        let req = DeleteRequest {
            id: self.bundle.id.clone(),
            exec_id: exec_id.to_string(),
            ..Default::default()
        };
        self.shim.task.delete(ctx(), &req).await
    }

    /// State of the init or an exec.
    pub async fn state(&self, exec_id: &str) -> ttrpc::Result<StateResponse> {
        let req = StateRequest {
            id: self.bundle.id.clone(),
            exec_id: exec_id.to_string(),
            ..Default::default()
        };
        self.shim.task.state(ctx(), &req).await
    }

    /// This container's events, once one with `topic` (and, for an exit, `exec_id`) arrived.
    pub async fn events_until(&self, topic: &str) -> super::Result<Vec<Recorded>> {
        let id = self.bundle.id.clone();
        let evs = self
            .events
            .wait_until(&format!("{topic} of {id}"), EVENT_GUARD, |evs| {
                evs.iter()
                    .any(|r| r.topic == topic && r.event.container_id() == Some(&id))
            })
            .await?;
        Ok(evs
            .into_iter()
            .filter(|r| r.event.container_id() == Some(&id))
            .collect())
    }
}
