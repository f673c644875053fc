//! The steps Create and Exec share: open stdio, have the agent create the
//! process (undone by KILL, wait and DeleteProcess), find its host pid,
//! and place it (cgroup, rlimits).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use oci_spec::runtime::{PosixRlimit, Spec};
use rund_proto::fdpass::FdKind;
use rund_proto::ContainerOptions;

use super::undo::Undo;
use super::TaskError;
use crate::cgroups::ContainerCgroup;
use crate::error::Result;
use crate::io::{self, pty::Pty, stdin::StdinFeeder};
use crate::rlimit::memlock::{self, OnFailure};
use crate::sandbox::agent::FdBatch;
use crate::sandbox::{pidmap, Sandbox};

/// What a process needs from the host before the agent creates it.
pub struct Spawn<'a> {
    pub sandbox: &'a Arc<Sandbox>,
    pub id: &'a str,
    pub exec_id: &'a str,
    pub stdio: &'a io::Stdio,
    /// fds beyond stdio: rootfs, binds, namespaces, devices, cgroup, init.
    pub owned: Vec<(FdKind, OwnedFd)>,
    /// Per-node mode: the stdio fds the shim copies through go to the keeper.
    pub keep_io: Option<io::KeepIo>,
}

/// A process the agent created, not yet started.
pub struct Spawned {
    pub host_pid: i32,
    /// Its pid in the agent's pid namespace.
    pub inner_pid: u32,
    pub stdin: Option<StdinFeeder>,
    pub pty: Option<Pty>,
    pub paused: bool,
}

enum Request {
    Container {
        spec_json: Vec<u8>,
        options: ContainerOptions,
    },
    Exec {
        process_json: Vec<u8>,
    },
}

pub async fn container(
    s: Spawn<'_>,
    spec: &Spec,
    options: ContainerOptions,
    undo: &mut Undo,
) -> Result<Spawned> {
    let spec_json = serde_json::to_vec(spec).map_err(|source| TaskError::Encode {
        what: "spec",
        source,
    })?;
    run(s, Request::Container { spec_json, options }, undo).await
}

pub async fn exec(
    s: Spawn<'_>,
    process: &oci_spec::runtime::Process,
    undo: &mut Undo,
) -> Result<Spawned> {
    let process_json = serde_json::to_vec(process).map_err(|source| TaskError::Encode {
        what: "process",
        source,
    })?;
    run(s, Request::Exec { process_json }, undo).await
}

async fn run(s: Spawn<'_>, req: Request, undo: &mut Undo) -> Result<Spawned> {
    let opened = io::open(s.stdio, s.keep_io.as_ref()).await?;
    let mut kinds = Vec::new();
    let mut fds = Vec::new();
    for (k, f) in opened.pass.iter().chain(s.owned.iter()) {
        kinds.push(k.clone());
        fds.push(f.as_fd());
    }
    let batch = FdBatch { kinds, fds };
    let agent = &s.sandbox.agent;
    let terminal = s.stdio.terminal;
    let (inner_pid, paused) = match req {
        Request::Container { spec_json, options } => {
            agent
                .create_container(s.id, batch, spec_json, options, terminal)
                .await?
        }
        Request::Exec { process_json } => {
            let pid = agent
                .exec_process(s.id, s.exec_id, batch, process_json, terminal)
                .await?;
            (pid, false)
        }
    };
    let (sb, id, exec_id) = (s.sandbox.clone(), s.id.to_string(), s.exec_id.to_string());
    undo.push("agent process", async move {
        end_process(&sb, &id, &exec_id).await;
    });
    let agent_pid = s.sandbox.pid();
    let host_pid = tokio::task::spawn_blocking(move || {
        pidmap::host_pid(Path::new("/proc"), agent_pid, inner_pid)
    })
    .await
    .map_err(TaskError::blocking("host pid lookup"))??;
    let io::OpenedStdio { pass, stdin, pty } = opened;
    drop(pass);
    Ok(Spawned {
        host_pid,
        inner_pid,
        stdin,
        pty,
        paused,
    })
}

/// Kills a created process and forgets it in the agent.
async fn end_process(sb: &Sandbox, id: &str, exec_id: &str) {
    let _ = sb.agent.signal(id, exec_id, libc::SIGKILL as u32).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), sb.agent.wait(id, exec_id)).await;
    let _ = sb.agent.delete_process(id, exec_id).await;
}

/// Puts the process in its cgroup and raises its rlimits from here, the
/// initial user namespace (only there can a hard limit go up).
/// The fds that let the agent fork a process born in `cg`, so placement
/// has nothing to move: the v2 directory (not from inside a user namespace,
/// where the kernel refuses CLONE_INTO_CGROUP into a host-owned cgroup), or
/// v1's `tasks` files.
pub fn birthplace(cg: &ContainerCgroup, userns: bool) -> Vec<(FdKind, OwnedFd)> {
    let mut fds: Vec<_> = cg
        .tasks_fds()
        .into_iter()
        .map(|fd| (FdKind::CgroupTasks, fd))
        .collect();
    if !userns {
        fds.extend(cg.dir_fd().map(|fd| (FdKind::Cgroup, fd)));
    }
    fds
}

pub async fn place(
    p: &Spawned,
    cg: Option<&ContainerCgroup>,
    rlimits: &[PosixRlimit],
    on_failure: OnFailure,
) -> Result<()> {
    if let Some(cg) = cg {
        cg.add_pid(p.host_pid).await?;
    }
    for w in memlock::apply(p.host_pid, rlimits, on_failure)? {
        tracing::warn!(pid = p.host_pid, "{w}");
    }
    Ok(())
}
