//! The ttrpc Agent service.

mod birth;
pub mod channel;
pub mod claim;
mod create;
mod destroy;
pub mod idle;
pub mod initbin;
pub mod podinit;
pub mod signal;
pub mod spawn;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
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
    pub init_bin: initbin::InitBinary,
    /// The pod's shared pid namespace, once a container asked for it.
    pub pod_pid: Mutex<Option<podinit::PodPid>>,
    /// The sandbox shares the host pid namespace: the agent is not an init,
    /// so "every process" must never mean kill(-1).
    pub host_pid: bool,
    /// Unmaps the start-up pages once no process starts or goes for a while.
    pub idle: idle::IdleTrim,
    /// A warm agent waits for one ClaimSandbox.
    pub warmth: Mutex<claim::Warmth>,
    /// The sandbox's id, for the log ("warm" until claimed).
    pub sandbox_id: Mutex<String>,
}

/// Kills every container at once (the shim is gone).
pub async fn destroy_now(svc: &AgentService) {
    destroy::sandbox(svc, std::time::Duration::ZERO).await;
}

pub fn err(code: ttrpc::Code, msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg.into()))
}

pub fn not_found(id: &str, exec_id: &str) -> ttrpc::Error {
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
    pub fn sandbox_id(&self) -> String {
        self.sandbox_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Agent for AgentService {
    async fn ping(&self, _ctx: &TtrpcContext, req: PingRequest) -> ttrpc::Result<PingResponse> {
        if req.protocol_version != PROTOCOL_VERSION {
            return Err(err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!(
                    "the shim speaks agent protocol v{} but this rund-agent speaks v{PROTOCOL_VERSION}: install matching rund binaries",
                    req.protocol_version
                ),
            ));
        }
        Ok(PingResponse {
            agent_pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: PROTOCOL_VERSION,
            ..Default::default()
        })
    }

    async fn claim_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: ClaimSandboxRequest,
    ) -> ttrpc::Result<Empty> {
        claim::sandbox(self, req).await?;
        Ok(Empty::default())
    }

    async fn create_container(
        &self,
        _ctx: &TtrpcContext,
        req: CreateContainerRequest,
    ) -> ttrpc::Result<CreateContainerResponse> {
        create::container(self, req).await
    }

    async fn resume_container(
        &self,
        _ctx: &TtrpcContext,
        req: ResumeContainerRequest,
    ) -> ttrpc::Result<Empty> {
        create::resume(self, &req.container_id).await?;
        Ok(Empty::default())
    }

    async fn exec_process(
        &self,
        _ctx: &TtrpcContext,
        req: ExecProcessRequest,
    ) -> ttrpc::Result<ExecProcessResponse> {
        create::exec(self, req).await
    }

    async fn start_process(
        &self,
        _ctx: &TtrpcContext,
        req: StartProcessRequest,
    ) -> ttrpc::Result<Empty> {
        let sync = {
            let mut st = self.state();
            let (id, exec_id) = (&req.container_id, &req.exec_id);
            if st.containers.get(id).is_some_and(|c| c.paused) {
                return Err(err(
                    ttrpc::Code::FAILED_PRECONDITION,
                    format!("container {id} is paused in set-up: resume it first"),
                ));
            }
            let p = st
                .proc_mut(id, exec_id)
                .ok_or_else(|| not_found(id, exec_id))?;
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
        self.idle.activity();
        Ok(Empty::default())
    }

    async fn signal_process(
        &self,
        _ctx: &TtrpcContext,
        req: SignalProcessRequest,
    ) -> ttrpc::Result<Empty> {
        let sig = req.signal as i32;
        if !(1..=signal::SIGMAX).contains(&sig) {
            return Err(err(
                ttrpc::Code::INVALID_ARGUMENT,
                format!("invalid signal {}", req.signal),
            ));
        }
        let mut st = self.state();
        let p = st
            .proc_mut(&req.container_id, &req.exec_id)
            .ok_or_else(|| not_found(&req.container_id, &req.exec_id))?;
        if p.exited() {
            return Err(err(ttrpc::Code::NOT_FOUND, "process already exited"));
        }
        let pid = p.pid.as_raw();
        let plan = if p.ns_init {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            signal::plan(sig, &status)
        } else {
            signal::Plan::Send(sig)
        };
        let r = match plan {
            signal::Plan::Send(s) => signal::send(pid, s),
            signal::Plan::KillFor(s) => {
                p.killed_for = Some(s);
                signal::send(pid, libc::SIGKILL)
            }
            signal::Plan::Nothing => Ok(()),
        };
        r.map_err(|e| err(ttrpc::Code::INTERNAL, format!("kill {pid} {sig}: {e}")))?;
        Ok(Empty::default())
    }

    async fn wait_process(
        &self,
        _ctx: &TtrpcContext,
        req: WaitProcessRequest,
    ) -> ttrpc::Result<WaitProcessResponse> {
        let (id, exec_id) = (&req.container_id, &req.exec_id);
        let mut rx = {
            let st = self.state();
            st.proc(id, exec_id)
                .ok_or_else(|| not_found(id, exec_id))?
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
        let killed_for = self.state().proc(id, exec_id).and_then(|p| p.killed_for);
        let status = match killed_for {
            // rund carried out this signal's default action with SIGKILL.
            Some(s) if exit.status == 128 + libc::SIGKILL as u32 => 128 + s as u32,
            _ => exit.status,
        };
        Ok(WaitProcessResponse {
            exit_status: status,
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
        drop(st);
        self.idle.activity();
        Ok(Empty::default())
    }

    async fn destroy_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: DestroySandboxRequest,
    ) -> ttrpc::Result<Empty> {
        destroy::sandbox(
            self,
            std::time::Duration::from_secs(req.grace_seconds.into()),
        )
        .await;
        self.destroyed.notify_one();
        Ok(Empty::default())
    }
}
