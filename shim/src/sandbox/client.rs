//! The shim's handle on a running agent: ttrpc client, fd side channel,
//! and the agent's host pid.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rund_proto::fdpass::{self, FdHeader};
use rund_proto::options::ContainerOptions;
use rund_proto::ttrpc::context;
use rund_proto::AgentClient;
use tokio::sync::Mutex;

use super::spawn::Spawned;
use super::SandboxError;

pub struct Agent {
    pub pid: i32,
    client: AgentClient,
    /// Held across "send fds + CreateProcess" so messages and RPCs pair up.
    fdpass: Mutex<OwnedFd>,
}

fn ctx() -> context::Context {
    context::with_timeout(Duration::from_secs(60).as_nanos() as i64)
}

/// Exit of a process as the agent reported it.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: u32,
    pub at_ns: i64,
}

impl Agent {
    pub async fn connect(spawned: Spawned) -> Result<Agent, SandboxError> {
        let client = rund_proto::ttrpc::r#async::Client::connect(&spawned.address)
            .await
            .map_err(|e| SandboxError::Rpc {
                rpc: "connect",
                status: e,
            })?;
        Ok(Agent {
            pid: spawned.pid,
            client: AgentClient::new(client),
            fdpass: Mutex::new(spawned.fdpass),
        })
    }

    /// Sends the fds for one process, then creates it. Returns the pid in
    /// the agent's namespace.
    pub async fn create_process(
        &self,
        header: FdHeader,
        fds: &[BorrowedFd<'_>],
        spec_json: Vec<u8>,
        options: &ContainerOptions,
        terminal: bool,
    ) -> Result<u32, SandboxError> {
        let sock = self.fdpass.lock().await;
        fdpass::send(sock.as_fd(), &header, fds)?;
        let req = rund_proto::CreateProcessRequest {
            container_id: header.container_id.clone(),
            exec_id: header.exec_id.clone(),
            spec_json,
            options_json: serde_json::to_vec(options).expect("options serialize"),
            terminal,
            ..Default::default()
        };
        let resp = self
            .client
            .create_process(ctx(), &req)
            .await
            .map_err(|status| SandboxError::Rpc {
                rpc: "CreateProcess",
                status,
            })?;
        Ok(resp.pid)
    }

    pub async fn start_process(&self, id: &str, exec_id: &str) -> Result<(), SandboxError> {
        let req = rund_proto::StartProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.client
            .start_process(ctx(), &req)
            .await
            .map(|_| ())
            .map_err(|status| SandboxError::Rpc {
                rpc: "StartProcess",
                status,
            })
    }

    pub async fn signal(
        &self,
        id: &str,
        exec_id: &str,
        signal: u32,
        all: bool,
    ) -> Result<(), SandboxError> {
        let req = rund_proto::SignalProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            signal,
            all,
            ..Default::default()
        };
        self.client
            .signal_process(ctx(), &req)
            .await
            .map(|_| ())
            .map_err(|status| SandboxError::Rpc {
                rpc: "SignalProcess",
                status,
            })
    }

    /// Long-polls until the process exits (no deadline).
    pub async fn wait(&self, id: &str, exec_id: &str) -> Result<Exit, SandboxError> {
        let req = rund_proto::WaitProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        let resp = self
            .client
            .wait_process(context::Context::default(), &req)
            .await
            .map_err(|status| SandboxError::Rpc {
                rpc: "WaitProcess",
                status,
            })?;
        Ok(Exit {
            status: resp.exit_status,
            at_ns: resp.exited_at_ns,
        })
    }

    pub async fn list_pids(&self, id: &str) -> Result<Vec<(u32, String)>, SandboxError> {
        let req = rund_proto::ListPidsRequest {
            container_id: id.into(),
            ..Default::default()
        };
        let resp =
            self.client
                .list_pids(ctx(), &req)
                .await
                .map_err(|status| SandboxError::Rpc {
                    rpc: "ListPids",
                    status,
                })?;
        Ok(resp
            .processes
            .into_iter()
            .map(|p| (p.pid, p.exec_id))
            .collect())
    }

    pub async fn delete_process(&self, id: &str, exec_id: &str) -> Result<(), SandboxError> {
        let req = rund_proto::DeleteProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.client
            .delete_process(ctx(), &req)
            .await
            .map(|_| ())
            .map_err(|status| SandboxError::Rpc {
                rpc: "DeleteProcess",
                status,
            })
    }

    /// TERM everything, wait `grace`, KILL the rest; the agent then exits.
    pub async fn destroy(&self, grace: Duration) -> Result<(), SandboxError> {
        let req = rund_proto::DestroySandboxRequest {
            grace_seconds: grace.as_secs() as u32,
            ..Default::default()
        };
        let deadline = context::with_timeout((grace + Duration::from_secs(10)).as_nanos() as i64);
        self.client
            .destroy_sandbox(deadline, &req)
            .await
            .map(|_| ())
            .map_err(|status| SandboxError::Rpc {
                rpc: "DestroySandbox",
                status,
            })
    }
}
