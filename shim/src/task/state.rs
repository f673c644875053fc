//! What the shim tracks per container and per process.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;

use oci_spec::runtime::Spec;
use tokio::sync::watch;

use crate::io::{pty::Pty, stdin::StdinFeeder, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Created,
    Running,
    Paused,
    Stopped,
}

#[derive(Debug, Clone, Copy)]
pub struct ExitInfo {
    pub status: u32,
    pub at_ns: i64,
}

/// The container's init or one exec.
pub struct Process {
    pub exec_id: String,
    /// Host pid (0 for the pod sandbox container before the agent exists).
    pub pid: AtomicI32,
    /// Pid in the agent's namespace.
    pub inner_pid: u32,
    pub stdio: Stdio,
    pub started: AtomicBool,
    /// Its exit is being watched (from Start, or from a Kill before it).
    exit_watched: AtomicBool,
    exit_tx: watch::Sender<Option<ExitInfo>>,
    pub stdin: Mutex<Option<StdinFeeder>>,
    pub pty: Option<Pty>,
}

impl Process {
    pub fn new(
        exec_id: &str,
        pid: i32,
        inner_pid: u32,
        stdio: Stdio,
        stdin: Option<StdinFeeder>,
        pty: Option<Pty>,
    ) -> Self {
        Process {
            exec_id: exec_id.into(),
            pid: AtomicI32::new(pid),
            inner_pid,
            stdio,
            started: AtomicBool::new(false),
            exit_watched: AtomicBool::new(false),
            exit_tx: watch::channel(None).0,
            stdin: Mutex::new(stdin),
            pty,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst).max(0) as u32
    }

    /// True for the first caller only: one exit watch per process.
    pub fn claim_exit_watch(&self) -> bool {
        !self.exit_watched.swap(true, Ordering::SeqCst)
    }

    pub fn exit(&self) -> Option<ExitInfo> {
        *self.exit_tx.borrow()
    }

    pub fn set_exit(&self, e: ExitInfo) {
        self.exit_tx.send_if_modified(|cur| {
            if cur.is_none() {
                *cur = Some(e);
                true
            } else {
                false
            }
        });
    }

    pub async fn wait_exit(&self) -> ExitInfo {
        let mut rx = self.exit_tx.subscribe();
        loop {
            if let Some(e) = *rx.borrow_and_update() {
                return e;
            }
            if rx.changed().await.is_err() {
                return ExitInfo {
                    status: 255,
                    at_ns: crate::clock::now_ns(),
                };
            }
        }
    }

    pub fn status(&self, paused: bool) -> Status {
        if self.exit().is_some() {
            Status::Stopped
        } else if !self.started.load(Ordering::SeqCst) {
            Status::Created
        } else if paused {
            Status::Paused
        } else {
            Status::Running
        }
    }

    pub fn close_stdin(&self) {
        if let Some(s) = self.stdin.lock().expect("stdin lock").take() {
            s.close();
        }
        if let Some(p) = &self.pty {
            p.close_stdin();
        }
    }
}

pub struct Container {
    pub id: String,
    pub bundle: PathBuf,
    pub spec: Spec,
    /// The agent plays this container (CRI pod sandbox): no process of its own.
    pub is_pod_sandbox: bool,
    pub rootfs_mounted: bool,
    pub cgroup: Option<crate::cgroups::ContainerCgroup>,
    pub init: std::sync::Arc<Process>,
    /// Execs by id; `None` while the exec is being created.
    pub execs: Mutex<HashMap<String, Option<std::sync::Arc<Process>>>>,
    pub paused: AtomicBool,
    /// The OOM event source, once the init started.
    pub oom: Mutex<Option<std::sync::Arc<tokio::io::unix::AsyncFd<rund_cgroup::OomWatcher>>>>,
    /// The task reading it; aborted on Delete, before the cgroup is reused.
    pub oom_task: Mutex<Option<tokio::task::AbortHandle>>,
    /// Serialises OOM and exit publication (TaskOOM before TaskExit).
    pub oom_order: tokio::sync::Mutex<()>,
}

impl Container {
    pub fn new(
        id: &str,
        bundle: &std::path::Path,
        spec: Spec,
        is_pod_sandbox: bool,
        rootfs_mounted: bool,
        cgroup: Option<crate::cgroups::ContainerCgroup>,
        init: std::sync::Arc<Process>,
    ) -> Self {
        Container {
            id: id.to_string(),
            bundle: bundle.to_path_buf(),
            spec,
            is_pod_sandbox,
            rootfs_mounted,
            cgroup,
            init,
            execs: Default::default(),
            paused: Default::default(),
            oom: Default::default(),
            oom_task: Default::default(),
            oom_order: Default::default(),
        }
    }

    pub fn process(&self, exec_id: &str) -> Option<std::sync::Arc<Process>> {
        if exec_id.is_empty() {
            return Some(self.init.clone());
        }
        self.execs
            .lock()
            .expect("execs")
            .get(exec_id)
            .cloned()
            .flatten()
    }

    /// The init and every exec created so far.
    pub fn processes(&self) -> Vec<std::sync::Arc<Process>> {
        let execs = self.execs.lock().expect("execs");
        std::iter::once(self.init.clone())
            .chain(execs.values().flatten().cloned())
            .collect()
    }

    /// Stops OOM watching: the task ends and the watcher's fds close, so a
    /// recycled cgroup never reports its next tenant's OOMs under this id.
    pub fn stop_oom_watch(&self) {
        if let Some(task) = self.oom_task.lock().expect("oom lock").take() {
            task.abort();
        }
        self.oom.lock().expect("oom lock").take();
    }

    /// Reserves an exec id; `None` if it is taken.
    pub fn reserve_exec(&self, exec_id: &str) -> Option<ExecSlot<'_>> {
        let mut execs = self.execs.lock().expect("execs");
        if execs.contains_key(exec_id) {
            return None;
        }
        execs.insert(exec_id.to_string(), None);
        Some(ExecSlot {
            c: self,
            exec_id: exec_id.to_string(),
            filled: false,
        })
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }
}

/// A reserved exec id: dropped unfilled, the reservation goes.
pub struct ExecSlot<'a> {
    c: &'a Container,
    exec_id: String,
    filled: bool,
}

impl ExecSlot<'_> {
    pub fn fill(mut self, p: std::sync::Arc<Process>) {
        self.c
            .execs
            .lock()
            .expect("execs")
            .insert(self.exec_id.clone(), Some(p));
        self.filled = true;
    }
}

impl Drop for ExecSlot<'_> {
    fn drop(&mut self) {
        if !self.filled {
            self.c.execs.lock().expect("execs").remove(&self.exec_id);
        }
    }
}
