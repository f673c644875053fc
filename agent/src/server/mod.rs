//! The ttrpc Agent service.

pub mod channel;
pub mod spawn;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rund_proto::*;
use ttrpc::r#async::TtrpcContext;

use crate::reaper::Reaper;
use channel::FdChannel;
use state::{container_pids, State};

pub struct AgentService {
    pub reaper: Reaper,
    pub fdpass: FdChannel,
    pub state: Mutex<State>,
    /// Notified once DestroySandbox has answered: the agent then exits.
    pub destroyed: Arc<tokio::sync::Notify>,
}

fn err(code: ttrpc::Code, msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg.into()))
}

fn not_found(id: &str, exec_id: &str) -> ttrpc::Error {
    if exec_id.is_empty() {
        err(ttrpc::Code::NOT_FOUND, format!("container {id} not found"))
    } else {
        err(
            ttrpc::Code::NOT_FOUND,
            format!("exec {exec_id} of container {id} not found"),
        )
    }
}

impl AgentService {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Agent for AgentService {
    async fn ping(&self, _ctx: &TtrpcContext, _: Empty) -> ttrpc::Result<PingResponse> {
        Ok(PingResponse {
            agent_pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
    }

    async fn create_process(
        &self,
        _ctx: &TtrpcContext,
        req: CreateProcessRequest,
    ) -> ttrpc::Result<CreateProcessResponse> {
        let (id, exec_id) = (req.container_id.as_str(), req.exec_id.as_str());
        crate::debug!("CreateProcess {id}/{exec_id}");
        let fds = self
            .fdpass
            .take(id, exec_id)
            .await
            .map_err(|e| err(ttrpc::Code::INTERNAL, e))?;
        let pid = if exec_id.is_empty() {
            if self.state().containers.contains_key(id) {
                return Err(err(
                    ttrpc::Code::ALREADY_EXISTS,
                    format!("container {id} already exists"),
                ));
            }
            let c = spawn::create_init(
                &self.reaper,
                id,
                &req.spec_json,
                &req.options_json,
                req.terminal,
                fds,
            )
            .await
            .map_err(|e| err(e.code, e.message))?;
            let pid = c.init.pid;
            self.state().containers.insert(id.to_string(), c);
            pid
        } else {
            // The container is taken out while the exec is set up (the table
            // cannot be locked across an await) and put back afterwards.
            let c = {
                let mut st = self.state();
                let c = st.containers.get(id).ok_or_else(|| not_found(id, ""))?;
                if c.execs.contains_key(exec_id) {
                    return Err(err(
                        ttrpc::Code::ALREADY_EXISTS,
                        format!("exec {exec_id} of container {id} already exists"),
                    ));
                }
                st.containers.remove(id).ok_or_else(|| not_found(id, ""))?
            };
            let res = spawn::create_exec(&self.reaper, &c, id, exec_id, &req.spec_json, fds).await;
            let mut st = self.state();
            let c = st.containers.entry(id.to_string()).or_insert(c);
            let p = res.map_err(|e| err(e.code, e.message))?;
            let pid = p.pid;
            c.execs.insert(exec_id.to_string(), p);
            pid
        };
        crate::info!("created {id}/{exec_id}: pid {pid}");
        Ok(CreateProcessResponse {
            pid: pid.as_raw() as u32,
            ..Default::default()
        })
    }

    async fn start_process(
        &self,
        _ctx: &TtrpcContext,
        req: StartProcessRequest,
    ) -> ttrpc::Result<Empty> {
        let sync = {
            let mut st = self.state();
            let p = st
                .proc_mut(&req.container_id, &req.exec_id)
                .ok_or_else(|| not_found(&req.container_id, &req.exec_id))?;
            p.sync
                .take()
                .ok_or_else(|| err(ttrpc::Code::FAILED_PRECONDITION, "process already started"))?
        };
        // A dead child makes this fail: its exit is reported by WaitProcess.
        let _ = nix::sys::socket::send(
            std::os::fd::AsRawFd::as_raw_fd(&sync),
            b"s",
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        );
        crate::debug!("started {}/{}", req.container_id, req.exec_id);
        Ok(Empty::default())
    }

    async fn signal_process(
        &self,
        _ctx: &TtrpcContext,
        req: SignalProcessRequest,
    ) -> ttrpc::Result<Empty> {
        let sig = Signal::try_from(req.signal as i32).map_err(|_| {
            err(
                ttrpc::Code::INVALID_ARGUMENT,
                format!("invalid signal {}", req.signal),
            )
        })?;
        let st = self.state();
        let p = st
            .proc(&req.container_id, &req.exec_id)
            .ok_or_else(|| not_found(&req.container_id, &req.exec_id))?;
        if p.exited() {
            return Err(err(ttrpc::Code::NOT_FOUND, "process already exited"));
        }
        if req.all {
            let c = &st.containers[&req.container_id];
            for pid in container_pids(c) {
                let _ = kill(Pid::from_raw(pid), sig);
            }
            return Ok(Empty::default());
        }
        kill(p.pid, sig)
            .map_err(|e| err(ttrpc::Code::INTERNAL, format!("kill {} {sig}: {e}", p.pid)))?;
        Ok(Empty::default())
    }

    async fn wait_process(
        &self,
        _ctx: &TtrpcContext,
        req: WaitProcessRequest,
    ) -> ttrpc::Result<WaitProcessResponse> {
        let mut rx = {
            let st = self.state();
            st.proc(&req.container_id, &req.exec_id)
                .ok_or_else(|| not_found(&req.container_id, &req.exec_id))?
                .exit
                .clone()
        };
        let exit = rx
            .wait_for(|e| e.is_some())
            .await
            .map_err(|_| err(ttrpc::Code::NOT_FOUND, "process was deleted while waiting"))?
            .unwrap_or(crate::reaper::Exit {
                status: 255,
                at_ns: 0,
            });
        Ok(WaitProcessResponse {
            exit_status: exit.status,
            exited_at_ns: exit.at_ns,
            ..Default::default()
        })
    }

    async fn list_pids(
        &self,
        _ctx: &TtrpcContext,
        req: ListPidsRequest,
    ) -> ttrpc::Result<ListPidsResponse> {
        let st = self.state();
        let c = st
            .containers
            .get(&req.container_id)
            .ok_or_else(|| not_found(&req.container_id, ""))?;
        let processes = container_pids(c)
            .into_iter()
            .map(|pid| {
                let exec_id = c
                    .execs
                    .iter()
                    .find(|(_, p)| p.pid.as_raw() == pid)
                    .map(|(k, _)| k.clone())
                    .unwrap_or_default();
                ProcessInfo {
                    pid: pid as u32,
                    exec_id,
                    ..Default::default()
                }
            })
            .collect();
        Ok(ListPidsResponse {
            processes,
            ..Default::default()
        })
    }

    async fn delete_process(
        &self,
        _ctx: &TtrpcContext,
        req: DeleteProcessRequest,
    ) -> ttrpc::Result<Empty> {
        let mut st = self.state();
        let (id, exec_id) = (&req.container_id, &req.exec_id);
        let p = st.proc(id, exec_id).ok_or_else(|| not_found(id, exec_id))?;
        if !p.exited() {
            return Err(err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!("process {id}/{exec_id} is still running"),
            ));
        }
        if exec_id.is_empty() {
            if let Some(c) = st.containers.remove(id) {
                self.reaper.forget(c.init.pid);
                for e in c.execs.values() {
                    self.reaper.forget(e.pid);
                }
            }
        } else if let Some(e) = st
            .containers
            .get_mut(id)
            .and_then(|c| c.execs.remove(exec_id))
        {
            self.reaper.forget(e.pid);
        }
        Ok(Empty::default())
    }

    async fn destroy_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: DestroySandboxRequest,
    ) -> ttrpc::Result<Empty> {
        crate::info!("destroying the sandbox (grace {}s)", req.grace_seconds);
        let waits = {
            let st = self.state();
            let mut waits = Vec::new();
            for c in st.containers.values() {
                for p in std::iter::once(&c.init).chain(c.execs.values()) {
                    if !p.exited() {
                        let _ = kill(p.pid, Signal::SIGTERM);
                        waits.push(p.exit.clone());
                    }
                }
            }
            waits
        };
        let all = |mut waits: Vec<crate::reaper::ExitRx>| async move {
            for w in waits.iter_mut() {
                let _ = w.wait_for(|e| e.is_some()).await;
            }
        };
        if tokio::time::timeout(
            Duration::from_secs(req.grace_seconds.into()),
            all(waits.clone()),
        )
        .await
        .is_err()
        {
            crate::info!("grace period over: killing what is left");
        }
        // PID 1 of the sandbox: kill(-1) reaches every other process in it.
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(10), all(waits)).await;
        self.reaper.reap_all();
        self.destroyed.notify_one();
        Ok(Empty::default())
    }
}
