//! The no-op Task service: bookkeeping and events only.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use async_trait::async_trait;
use containerd_shim::publisher::RemotePublisher;
use containerd_shim_protos::api::*;
use containerd_shim_protos::events::task::{TaskCreate, TaskDelete, TaskExit, TaskStart};
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::MessageDyn;
use containerd_shim_protos::shim_async::Task;
use containerd_shim_protos::topics::*;
use containerd_shim_protos::ttrpc::context::Context;
use containerd_shim_protos::ttrpc::r#async::TtrpcContext;
use containerd_shim_protos::ttrpc::{get_status, Code, Error, Result};
use tokio::sync::{watch, Notify};

/// The exit status once the task has "exited".
type Exit = Option<(u32, Timestamp)>;

struct NoopTask {
    bundle: String,
    started: bool,
    /// The task ends at once after Start (argv `/bin/true`).
    exits_at_once: bool,
    exit: watch::Sender<Exit>,
    /// Held open until exit, so readers see EOF then, as with a real workload.
    stdio: Vec<File>,
}

pub struct Noop {
    tasks: Mutex<HashMap<String, NoopTask>>,
    publisher: Option<RemotePublisher>,
    namespace: String,
    pub shutdown: Notify,
}

fn err(code: Code, msg: String) -> Error {
    Error::RpcStatus(get_status(code, msg))
}

fn now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
        ..Default::default()
    }
}

fn pid() -> u32 {
    std::process::id()
}

/// Opens an output FIFO without blocking on a missing reader.
fn open_output(path: &str) -> Option<File> {
    let path = path.strip_prefix("fifo://").unwrap_or(path);
    if path.is_empty() {
        return None;
    }
    let nb = |write: bool| {
        OpenOptions::new()
            .read(!write)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    nb(true).or_else(|_| nb(false)).ok()
}

/// Whether the bundle's process is `/bin/true` (ends at once).
fn exits_at_once(bundle: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("{bundle}/config.json")) else {
        return false;
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["process"]["args"][0]
        .as_str()
        .is_some_and(|a| a.rsplit('/').next() == Some("true"))
}

impl Noop {
    pub fn new(publisher: Option<RemotePublisher>, namespace: String) -> Noop {
        Noop {
            tasks: Mutex::new(HashMap::new()),
            publisher,
            namespace,
            shutdown: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, NoopTask>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn publish(&self, topic: &str, ev: Box<dyn MessageDyn>) {
        if let Some(p) = &self.publisher {
            let _ = p
                .publish(Context::default(), topic, &self.namespace, ev)
                .await;
        }
    }

    /// Marks the task exited (once) and publishes TaskExit.
    async fn exit(&self, id: &str, status: u32) {
        let at = now();
        let newly = {
            let mut tasks = self.lock();
            let Some(t) = tasks.get_mut(id) else { return };
            t.stdio.clear();
            t.exit.send_if_modified(|e| {
                let first = e.is_none();
                if first {
                    *e = Some((status, at.clone()));
                }
                first
            })
        };
        if newly {
            let ev = TaskExit {
                container_id: id.into(),
                id: id.into(),
                pid: pid(),
                exit_status: status,
                exited_at: Some(at).into(),
                ..Default::default()
            };
            self.publish(TASK_EXIT_EVENT_TOPIC, Box::new(ev)).await;
        }
    }

    fn exit_rx(&self, id: &str) -> Result<watch::Receiver<Exit>> {
        self.lock()
            .get(id)
            .map(|t| t.exit.subscribe())
            .ok_or_else(|| err(Code::NOT_FOUND, format!("task {id} not found")))
    }
}

#[async_trait]
impl Task for Noop {
    async fn create(&self, _: &TtrpcContext, req: CreateTaskRequest) -> Result<CreateTaskResponse> {
        let stdio = [&req.stdout, &req.stderr]
            .into_iter()
            .filter_map(|p| open_output(p))
            .collect();
        let task = NoopTask {
            bundle: req.bundle.clone(),
            started: false,
            exits_at_once: exits_at_once(&req.bundle),
            exit: watch::channel(None).0,
            stdio,
        };
        if self.lock().insert(req.id.clone(), task).is_some() {
            return Err(err(Code::ALREADY_EXISTS, format!("task {}", req.id)));
        }
        let ev = TaskCreate {
            container_id: req.id.clone(),
            bundle: req.bundle.clone(),
            pid: pid(),
            ..Default::default()
        };
        self.publish(TASK_CREATE_EVENT_TOPIC, Box::new(ev)).await;
        Ok(CreateTaskResponse {
            pid: pid(),
            ..Default::default()
        })
    }

    async fn start(&self, _: &TtrpcContext, req: StartRequest) -> Result<StartResponse> {
        let at_once = {
            let mut tasks = self.lock();
            let t = tasks
                .get_mut(&req.id)
                .ok_or_else(|| err(Code::NOT_FOUND, format!("task {}", req.id)))?;
            t.started = true;
            t.exits_at_once
        };
        let ev = TaskStart {
            container_id: req.id.clone(),
            pid: pid(),
            ..Default::default()
        };
        self.publish(TASK_START_EVENT_TOPIC, Box::new(ev)).await;
        if at_once {
            self.exit(&req.id, 0).await;
        }
        Ok(StartResponse {
            pid: pid(),
            ..Default::default()
        })
    }

    async fn state(&self, _: &TtrpcContext, req: StateRequest) -> Result<StateResponse> {
        let tasks = self.lock();
        let t = tasks
            .get(&req.id)
            .ok_or_else(|| err(Code::NOT_FOUND, format!("task {}", req.id)))?;
        let exit = t.exit.borrow().clone();
        let status = match (&exit, t.started) {
            (Some(_), _) => Status::STOPPED,
            (None, true) => Status::RUNNING,
            (None, false) => Status::CREATED,
        };
        let (exit_status, exited_at) = exit.map(|(s, at)| (s, Some(at))).unwrap_or_default();
        Ok(StateResponse {
            id: req.id.clone(),
            bundle: t.bundle.clone(),
            pid: pid(),
            status: status.into(),
            stdout: String::new(),
            exit_status,
            exited_at: exited_at.into(),
            ..Default::default()
        })
    }

    async fn kill(&self, _: &TtrpcContext, req: KillRequest) -> Result<Empty> {
        self.exit_rx(&req.id)?;
        self.exit(&req.id, 128 + req.signal).await;
        Ok(Empty::new())
    }

    async fn wait(&self, _: &TtrpcContext, req: WaitRequest) -> Result<WaitResponse> {
        let mut rx = self.exit_rx(&req.id)?;
        let exit = rx
            .wait_for(Option::is_some)
            .await
            .map_err(|_| err(Code::INTERNAL, "task gone".into()))?
            .clone();
        let (exit_status, at) = exit.unwrap_or_default();
        Ok(WaitResponse {
            exit_status,
            exited_at: Some(at).into(),
            ..Default::default()
        })
    }

    async fn delete(&self, _: &TtrpcContext, req: DeleteRequest) -> Result<DeleteResponse> {
        let t = self
            .lock()
            .remove(&req.id)
            .ok_or_else(|| err(Code::NOT_FOUND, format!("task {}", req.id)))?;
        let (exit_status, at) = t.exit.borrow().clone().unwrap_or((137, now()));
        let ev = TaskDelete {
            container_id: req.id.clone(),
            pid: pid(),
            exit_status,
            exited_at: Some(at.clone()).into(),
            ..Default::default()
        };
        self.publish(TASK_DELETE_EVENT_TOPIC, Box::new(ev)).await;
        Ok(DeleteResponse {
            pid: pid(),
            exit_status,
            exited_at: Some(at).into(),
            ..Default::default()
        })
    }

    async fn connect(&self, _: &TtrpcContext, _: ConnectRequest) -> Result<ConnectResponse> {
        Ok(ConnectResponse {
            shim_pid: pid(),
            task_pid: pid(),
            ..Default::default()
        })
    }

    async fn shutdown(&self, _: &TtrpcContext, _: ShutdownRequest) -> Result<Empty> {
        if self.lock().is_empty() {
            self.shutdown.notify_one();
        }
        Ok(Empty::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bin_true_exits_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().to_str().unwrap();
        assert!(!exits_at_once(b), "no config.json: runs until killed");
        let cfg = |args: &str| {
            std::fs::write(
                dir.path().join("config.json"),
                format!(r#"{{"process":{{"args":{args}}}}}"#),
            )
            .unwrap()
        };
        cfg(r#"["/bin/true"]"#);
        assert!(exits_at_once(b));
        cfg(r#"["/bin/sleep","100000"]"#);
        assert!(!exits_at_once(b));
        cfg(r#"["/bin/truex"]"#);
        assert!(!exits_at_once(b));
    }

    #[test]
    fn output_fifo_without_reader_opens_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let uri = format!("fifo://{}", p.display());
        assert!(open_output(&uri).is_some());
        assert!(open_output("").is_none());
    }
}
