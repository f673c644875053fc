//! The shim's handle on a running agent: ttrpc client on the socketpair,
//! fd side channel, and the agent's host pid.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use rund_proto::fdpass::{self, FdHeader, FdKind};
use rund_proto::ttrpc::context;
use rund_proto::{AgentClient, ContainerOptions, PROTOCOL_VERSION};

use super::spawn::Spawned;
use super::SandboxError;

pub struct Agent {
    pub pid: i32,
    /// The ttrpc socket's number; the client owns it for the agent's life.
    conn_raw: RawFd,
    client: AgentClient,
    /// The side channel and the last batch number: a batch is numbered and
    /// sent under this lock, so batches arrive in number order.
    fdpass: Mutex<(OwnedFd, u64)>,
}

fn ctx() -> context::Context {
    context::with_timeout(Duration::from_secs(60).as_nanos() as i64)
}

fn rpc(rpc: &'static str) -> impl FnOnce(rund_proto::ttrpc::Error) -> SandboxError {
    move |status| SandboxError::Rpc { rpc, status }
}

/// Exit of a process as the agent reported it.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub status: u32,
    pub at_ns: i64,
}

/// The fds of one request, in the order of their kinds.
pub struct FdBatch<'a> {
    pub kinds: Vec<FdKind>,
    pub fds: Vec<BorrowedFd<'a>>,
}

impl Agent {
    /// Connects over the inherited socketpair and checks the protocol version.
    pub async fn connect(spawned: Spawned) -> Result<Agent, SandboxError> {
        Self::open(spawned.pid, spawned.conn, spawned.fdpass, 0).await
    }

    /// Takes over an agent a dead node shim served. A new ttrpc connection
    /// goes over the fd side channel: the old one may still carry answers to
    /// the dead shim's requests, which would reach a new client under its
    /// own stream ids. Batches number from `seq_base`, above any the dead
    /// shim sent.
    pub async fn adopt(pid: i32, fdpass: OwnedFd, seq_base: u64) -> Result<Agent, SandboxError> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| SandboxError::Spawn(format!("socketpair: {e}")))?;
        let header = FdHeader {
            seq: seq_base,
            fds: vec![FdKind::Conn],
        };
        fdpass::send(fdpass.as_fd(), &header, &[theirs.as_fd()])?;
        drop(theirs);
        Self::open(pid, ours.into(), fdpass, seq_base).await
    }

    /// An agent that died while no node shim served it: its connection's
    /// far end is closed, so each request fails as it does when a served
    /// agent dies. `pid` is only recorded: the keeper reaped it.
    pub fn gone(pid: i32) -> Result<Agent, SandboxError> {
        let pair = || {
            std::os::unix::net::UnixStream::pair()
                .map_err(|e| SandboxError::Spawn(format!("socketpair: {e}")))
        };
        let (conn, fdpass) = (pair()?.0, pair()?.0);
        let conn_raw = conn.as_raw_fd();
        let client = rund_proto::conn::client(conn.into())
            .map_err(|e| SandboxError::Spawn(format!("agent connection: {e}")))?;
        Ok(Agent {
            pid,
            conn_raw,
            client: AgentClient::new(client),
            fdpass: Mutex::new((fdpass.into(), 0)),
        })
    }

    async fn open(
        pid: i32,
        conn: OwnedFd,
        fdpass: OwnedFd,
        seq: u64,
    ) -> Result<Agent, SandboxError> {
        let conn_raw = conn.as_raw_fd();
        let client = rund_proto::conn::client(conn)
            .map_err(|e| SandboxError::Spawn(format!("agent connection: {e}")))?;
        let agent = Agent {
            pid,
            conn_raw,
            client: AgentClient::new(client),
            fdpass: Mutex::new((fdpass, seq)),
        };
        let req = rund_proto::PingRequest {
            protocol_version: PROTOCOL_VERSION,
            ..Default::default()
        };
        agent.client.ping(ctx(), &req).await.map_err(rpc("Ping"))?;
        Ok(agent)
    }

    /// Copies of the ttrpc socket and the fd side channel, for the node's
    /// keeper: while it holds them, the agent outlives this process.
    pub fn dup_fds(&self) -> std::io::Result<[OwnedFd; 2]> {
        // SAFETY: the client owns `conn_raw` and lives as long as `self`.
        let conn = unsafe { BorrowedFd::borrow_raw(self.conn_raw) }.try_clone_to_owned()?;
        let fdpass = self
            .fdpass
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .try_clone()?;
        Ok([conn, fdpass])
    }

    /// Sends one fd batch; returns its number.
    fn send_batch(&self, batch: &FdBatch<'_>) -> Result<u64, SandboxError> {
        let mut guard = self.fdpass.lock().unwrap_or_else(|e| e.into_inner());
        let seq = guard.1 + 1;
        let header = FdHeader {
            seq,
            fds: batch.kinds.clone(),
        };
        fdpass::send(guard.0.as_fd(), &header, &batch.fds)?;
        guard.1 = seq;
        Ok(seq)
    }

    /// Sends the container's fds, then creates it. Returns the init's pid in
    /// the agent's namespace, and whether set-up paused before pivot_root.
    pub async fn create_container(
        &self,
        id: &str,
        batch: FdBatch<'_>,
        spec_json: Vec<u8>,
        options: ContainerOptions,
        terminal: bool,
    ) -> Result<(u32, bool), SandboxError> {
        let fd_seq = self.send_batch(&batch)?;
        drop(batch);
        let req = rund_proto::CreateContainerRequest {
            container_id: id.into(),
            fd_seq,
            oci_spec: spec_json,
            options: Some(options).into(),
            terminal,
            ..Default::default()
        };
        let resp = self
            .client
            .create_container(ctx(), &req)
            .await
            .map_err(rpc("CreateContainer"))?;
        Ok((resp.pid, resp.paused))
    }

    pub async fn resume_container(&self, id: &str) -> Result<(), SandboxError> {
        let req = rund_proto::ResumeContainerRequest {
            container_id: id.into(),
            ..Default::default()
        };
        self.client
            .resume_container(ctx(), &req)
            .await
            .map(drop)
            .map_err(rpc("ResumeContainer"))
    }

    /// Sends the exec's fds, then creates it; returns its agent-namespace pid.
    pub async fn exec_process(
        &self,
        id: &str,
        exec_id: &str,
        batch: FdBatch<'_>,
        process_json: Vec<u8>,
        terminal: bool,
    ) -> Result<u32, SandboxError> {
        let fd_seq = self.send_batch(&batch)?;
        drop(batch);
        let req = rund_proto::ExecProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            fd_seq,
            oci_process: process_json,
            terminal,
            ..Default::default()
        };
        let resp = self
            .client
            .exec_process(ctx(), &req)
            .await
            .map_err(rpc("ExecProcess"))?;
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
            .map(drop)
            .map_err(rpc("StartProcess"))
    }

    pub async fn signal(&self, id: &str, exec_id: &str, signal: u32) -> Result<(), SandboxError> {
        let req = rund_proto::SignalProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            signal,
            ..Default::default()
        };
        self.client
            .signal_process(ctx(), &req)
            .await
            .map(drop)
            .map_err(rpc("SignalProcess"))
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
            .map_err(rpc("WaitProcess"))?;
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
        let resp = self
            .client
            .list_pids(ctx(), &req)
            .await
            .map_err(rpc("ListPids"))?;
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
            .map(drop)
            .map_err(rpc("DeleteProcess"))
    }

    /// Makes a warm agent the sandbox `id`: it joins `net` (or makes a new
    /// network namespace), sets the hostname and writes the pod sysctls.
    pub async fn claim(
        &self,
        id: &str,
        net: Option<BorrowedFd<'_>>,
        new_net: bool,
        hostname: Option<&str>,
        sysctls: &[(String, String)],
    ) -> Result<(), SandboxError> {
        let fd_seq = match net {
            Some(fd) => self.send_batch(&FdBatch {
                kinds: vec![FdKind::Namespace("net".into())],
                fds: vec![fd],
            })?,
            None => 0,
        };
        let req = rund_proto::ClaimSandboxRequest {
            sandbox_id: id.into(),
            fd_seq,
            new_net,
            hostname: hostname.unwrap_or_default().into(),
            sysctls: sysctls
                .iter()
                .map(|(k, v)| rund_proto::Sysctl {
                    key: k.clone(),
                    value: v.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        self.client
            .claim_sandbox(ctx(), &req)
            .await
            .map(drop)
            .map_err(rpc("ClaimSandbox"))
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
            .map(drop)
            .map_err(rpc("DestroySandbox"))
    }
}
