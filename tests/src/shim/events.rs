//! A fake containerd events endpoint: the ttrpc `containerd.services.events.ttrpc.v1.Events`
//! service a shim publishes to (its `TTRPC_ADDRESS`). That service has one RPC, Forward (the
//! Publish RPC exists only on containerd's gRPC events service); every Forward is recorded, in
//! arrival order, with its payload decoded.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use containerd_shim_protos::api::{Empty, ForwardRequest};
use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskOOM, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::shim_async::{create_events, Events};
use containerd_shim_protos::ttrpc;
use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use containerd_shim_protos::ttrpc::r#async::{Server, TtrpcContext};
use tokio::sync::watch;

use super::error::{IoCtx, Result, ShimHarnessError};

/// A task event, decoded from the envelope's `Any`.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEvent {
    Create(TaskCreate),
    Start(TaskStart),
    Exit(TaskExit),
    Delete(TaskDelete),
    ExecAdded(TaskExecAdded),
    ExecStarted(TaskExecStarted),
    Oom(TaskOOM),
    /// Any other payload (or one that failed to decode), kept raw.
    Other {
        type_url: String,
        value: Vec<u8>,
    },
}

impl TaskEvent {
    /// Decodes by the type name containerd uses (`containerd.events.TaskCreate`, ...).
    pub fn decode(any: &Any) -> TaskEvent {
        fn parse<M: Message>(v: &[u8]) -> Option<M> {
            M::parse_from_bytes(v).ok()
        }
        let name = any.type_url.rsplit('/').next().unwrap_or_default();
        let v = &any.value;
        let decoded = match name {
            "containerd.events.TaskCreate" => parse(v).map(TaskEvent::Create),
            "containerd.events.TaskStart" => parse(v).map(TaskEvent::Start),
            "containerd.events.TaskExit" => parse(v).map(TaskEvent::Exit),
            "containerd.events.TaskDelete" => parse(v).map(TaskEvent::Delete),
            "containerd.events.TaskExecAdded" => parse(v).map(TaskEvent::ExecAdded),
            "containerd.events.TaskExecStarted" => parse(v).map(TaskEvent::ExecStarted),
            "containerd.events.TaskOOM" => parse(v).map(TaskEvent::Oom),
            _ => None,
        };
        decoded.unwrap_or_else(|| TaskEvent::Other {
            type_url: any.type_url.clone(),
            value: v.clone(),
        })
    }

    /// The container the event is about, if the payload names one.
    pub fn container_id(&self) -> Option<&str> {
        Some(match self {
            TaskEvent::Create(e) => &e.container_id,
            TaskEvent::Start(e) => &e.container_id,
            TaskEvent::Exit(e) => &e.container_id,
            TaskEvent::Delete(e) => &e.container_id,
            TaskEvent::ExecAdded(e) => &e.container_id,
            TaskEvent::ExecStarted(e) => &e.container_id,
            TaskEvent::Oom(e) => &e.container_id,
            TaskEvent::Other { .. } => return None,
        })
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub topic: String,
    pub namespace: String,
    pub event: TaskEvent,
}

#[derive(Default)]
struct Log {
    events: Mutex<Vec<Recorded>>,
}

struct Recorder {
    log: Arc<Log>,
    changed: watch::Sender<usize>,
}

impl Recorder {
    fn record(&self, r: Recorded) {
        let n = {
            let mut ev = self.log.events.lock().expect("events lock");
            ev.push(r);
            ev.len()
        };
        self.changed.send_replace(n);
    }
}

#[async_trait]
impl Events for Recorder {
    async fn forward(&self, _ctx: &TtrpcContext, req: ForwardRequest) -> ttrpc::Result<Empty> {
        let env = req.envelope();
        self.record(Recorded {
            topic: env.topic.clone(),
            namespace: env.namespace.clone(),
            event: TaskEvent::decode(env.event()),
        });
        Ok(Empty::new())
    }
}

/// The fake events server. Stop it with [`FakeEvents::stop`]; dropping it only removes the
/// socket file.
pub struct FakeEvents {
    path: PathBuf,
    log: Arc<Log>,
    changed: watch::Receiver<usize>,
    server: Option<Server>,
}

impl FakeEvents {
    /// Serves on the unix socket `path` (which must not be in use).
    pub async fn start(path: &Path) -> Result<FakeEvents> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).io("bind events socket", path)?;
        let listener = Listener::try_from(listener).io("events listener", path)?;
        let log = Arc::new(Log::default());
        let (tx, rx) = watch::channel(0);
        let recorder = Arc::new(Recorder {
            log: log.clone(),
            changed: tx,
        });
        let mut server = Server::new()
            .add_listener(listener)
            .register_service(create_events(recorder));
        server
            .start()
            .await
            .map_err(|source| ShimHarnessError::Ttrpc {
                what: "start events server",
                source,
            })?;
        Ok(FakeEvents {
            path: path.to_path_buf(),
            log,
            changed: rx,
            server: Some(server),
        })
    }

    /// The address to give a shim as `TTRPC_ADDRESS`.
    pub fn address(&self) -> &Path {
        &self.path
    }

    /// Everything recorded so far, in arrival order.
    pub fn all(&self) -> Vec<Recorded> {
        self.log.events.lock().expect("events lock").clone()
    }

    /// The events about one container, in arrival order.
    pub fn for_container(&self, id: &str) -> Vec<Recorded> {
        self.all()
            .into_iter()
            .filter(|r| r.event.container_id() == Some(id))
            .collect()
    }

    /// Waits until `done` holds for the recorded events; gives up after `limit` (a hang guard,
    /// not a timing assertion) with the events seen so far.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Recorded]) -> bool,
    ) -> Result<Vec<Recorded>> {
        let mut rx = self.changed.clone();
        let waited = tokio::time::timeout(limit, async {
            loop {
                rx.borrow_and_update();
                let now = self.all();
                if done(&now) {
                    return now;
                }
                if rx.changed().await.is_err() {
                    return now;
                }
            }
        })
        .await;
        match waited {
            Ok(evs) if done(&evs) => Ok(evs),
            _ => Err(ShimHarnessError::WaitTimeout {
                what: what.to_string(),
                secs: limit.as_secs(),
                seen: format!("{:?}", topics(&self.all())),
            }),
        }
    }

    /// Shuts the server down and removes its socket.
    pub async fn stop(mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.shutdown().await;
        }
    }
}

impl Drop for FakeEvents {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The topics of `events`, in order.
pub fn topics(events: &[Recorded]) -> Vec<String> {
    events.iter().map(|r| r.topic.clone()).collect()
}
