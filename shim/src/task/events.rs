//! Publishing task events to containerd, in order.
//!
//! Every event of this shim goes through its one queue (`publish.rs`), so
//! containerd sees events in the order handlers call `publish` (one that
//! fails every retry is dropped, never reordered). Handlers enforce the
//! lifecycle order (Create -> Start -> Exit -> Delete) by when they call it.

use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIO, TaskOOM, TaskPaused,
    TaskResumed, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::topics::*;

use super::publish::Publisher;

pub struct Events {
    publisher: Option<Publisher>,
    namespace: String,
}

pub fn timestamp_ns(ns: i64) -> Timestamp {
    let mut t = Timestamp::new();
    t.seconds = ns.div_euclid(1_000_000_000);
    t.nanos = ns.rem_euclid(1_000_000_000) as i32;
    t
}

impl Events {
    pub fn new(publisher: Option<Publisher>, namespace: String) -> Self {
        Events {
            publisher,
            namespace,
        }
    }

    async fn send<M: Message>(&self, topic: &str, ev: M) {
        let Some(p) = &self.publisher else { return };
        if let Err(e) = p.publish(topic, &self.namespace, &ev) {
            tracing::warn!(topic, "publishing event failed: {e}");
        }
    }

    /// Waits (bounded) until containerd has answered every event sent.
    pub async fn flush(&self, limit: std::time::Duration) {
        if let Some(p) = &self.publisher {
            p.flush(limit).await;
        }
    }

    pub async fn create(
        &self,
        id: &str,
        bundle: &str,
        pid: u32,
        stdio: &crate::io::Stdio,
        checkpoint: &str,
    ) {
        let ev = TaskCreate {
            container_id: id.into(),
            bundle: bundle.into(),
            io: Some(TaskIO {
                stdin: stdio.stdin.clone(),
                stdout: stdio.stdout.clone(),
                stderr: stdio.stderr.clone(),
                terminal: stdio.terminal,
                ..Default::default()
            })
            .into(),
            checkpoint: checkpoint.into(),
            pid,
            ..Default::default()
        };
        self.send(TASK_CREATE_EVENT_TOPIC, ev).await;
    }

    pub async fn start(&self, id: &str, pid: u32) {
        let ev = TaskStart {
            container_id: id.into(),
            pid,
            ..Default::default()
        };
        self.send(TASK_START_EVENT_TOPIC, ev).await;
    }

    pub async fn exit(&self, id: &str, exec_id: &str, pid: u32, status: u32, at_ns: i64) {
        let ev = TaskExit {
            container_id: id.into(),
            id: if exec_id.is_empty() {
                id.into()
            } else {
                exec_id.into()
            },
            pid,
            exit_status: status,
            exited_at: Some(timestamp_ns(at_ns)).into(),
            ..Default::default()
        };
        self.send(TASK_EXIT_EVENT_TOPIC, ev).await;
    }

    pub async fn delete(&self, id: &str, pid: u32, status: u32, at_ns: i64) {
        let ev = TaskDelete {
            container_id: id.into(),
            id: id.into(),
            pid,
            exit_status: status,
            exited_at: Some(timestamp_ns(at_ns)).into(),
            ..Default::default()
        };
        self.send(TASK_DELETE_EVENT_TOPIC, ev).await;
    }

    pub async fn exec_added(&self, id: &str, exec_id: &str) {
        let ev = TaskExecAdded {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.send(TASK_EXEC_ADDED_EVENT_TOPIC, ev).await;
    }

    pub async fn exec_started(&self, id: &str, exec_id: &str, pid: u32) {
        let ev = TaskExecStarted {
            container_id: id.into(),
            exec_id: exec_id.into(),
            pid,
            ..Default::default()
        };
        self.send(TASK_EXEC_STARTED_EVENT_TOPIC, ev).await;
    }

    pub async fn oom(&self, id: &str) {
        let ev = TaskOOM {
            container_id: id.into(),
            ..Default::default()
        };
        self.send(TASK_OOM_EVENT_TOPIC, ev).await;
    }

    pub async fn paused(&self, id: &str) {
        let ev = TaskPaused {
            container_id: id.into(),
            ..Default::default()
        };
        self.send(TASK_PAUSED_EVENT_TOPIC, ev).await;
    }

    pub async fn resumed(&self, id: &str) {
        let ev = TaskResumed {
            container_id: id.into(),
            ..Default::default()
        };
        self.send(TASK_RESUMED_EVENT_TOPIC, ev).await;
    }
}
