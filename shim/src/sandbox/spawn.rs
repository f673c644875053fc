//! Starting `rund-agent launch` and driving the launch handshake
//! (see `rund_proto::launch` for the protocol).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use rund_proto::fdpass::{self, FdHeader, FdKind};
use rund_proto::launch::{self, LaunchConfig, SyncMsg};

use super::SandboxError;
use crate::userns::idmap::{self, IdMapping};

/// Everything the shim decided about a new sandbox.
pub struct SpawnPlan {
    pub config: LaunchConfig,
    /// nsfs fds to join, by type ("user", "net", "ipc", "uts").
    pub join: Vec<(String, OwnedFd)>,
    /// uid/gid maps written from outside when `config.userns` is set, or
    /// checked against the joined user namespace's.
    pub uid_map: Vec<IdMapping>,
    pub gid_map: Vec<IdMapping>,
    pub agent_bin: PathBuf,
    /// Where the agent's stderr goes (the shim's log), if anywhere.
    pub log: Option<OwnedFd>,
}

/// A running agent: its host pid and the shim's ends of its channels.
pub struct Spawned {
    pub pid: i32,
    /// The shim's end of the ttrpc socketpair.
    pub conn: OwnedFd,
    pub fdpass: OwnedFd,
}

/// Starts the agent and waits until it serves ttrpc. On error nothing is
/// left running: the launcher and any forked agent are killed and reaped.
pub async fn spawn(plan: SpawnPlan) -> Result<Spawned, SandboxError> {
    tokio::task::spawn_blocking(move || spawn_blocking(plan))
        .await
        .map_err(|e| SandboxError::Spawn(format!("spawn task: {e}")))?
}

fn spawn_blocking(plan: SpawnPlan) -> Result<Spawned, SandboxError> {
    // A pre-connected pair: the agent serves only this connection, and no
    // socket name exists for another process to find.
    let (conn_shim, conn_agent) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| SandboxError::Spawn(format!("socketpair: {e}")))?;
    let (fd_shim, fd_agent) = seqpacket()?;
    let (sync_shim, sync_agent) = seqpacket()?;
    warm_page_cache(&plan.agent_bin);
    // Exec the agent through a read-only mount of its binary: inside a
    // container, /proc/<agent or exec>/exe cannot be opened for writing.
    let exe = crate::rootfs::detached::readonly_file(&plan.agent_bin)
        .map_err(|e| SandboxError::Spawn(format!("{}: {e}", plan.agent_bin.display())))?;
    let exe = high_fd(exe)?;

    let mut cmd = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    cmd.arg0("rund-agent")
        .arg("launch")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    match &plan.log {
        Some(log) => {
            let dup = log
                .try_clone()
                .map_err(|e| SandboxError::Spawn(format!("dup log fd: {e}")))?;
            cmd.stderr(Stdio::from(dup));
        }
        None => {
            cmd.stderr(Stdio::null());
        }
    }
    let inherit: [RawFd; 3] = [
        conn_agent.as_raw_fd(),
        fd_agent.as_raw_fd(),
        sync_agent.as_raw_fd(),
    ];
    // SAFETY: the closure only calls dup2/dup/fcntl (async-signal-safe) on fds
    // that stay open in the parent until spawn() returns.
    unsafe {
        cmd.pre_exec(move || remap_fds(&inherit));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| SandboxError::Spawn(format!("exec {}: {e}", plan.agent_bin.display())))?;
    drop(fd_agent);
    drop(sync_agent);
    drop(conn_agent);
    drop(exe);
    let launcher_pid = child.id() as i32;

    let result = handshake(&plan, &sync_shim, launcher_pid);
    // The launcher exits right after the handshake; reap it either way.
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let (agent_pid, ready) = result?;
    let next = if ready {
        Ok(SyncMsg::Ready)
    } else {
        launch::recv_json::<SyncMsg>(sync_shim.as_fd())
    };
    match next {
        Ok(SyncMsg::Ready) => {}
        Ok(SyncMsg::Error { message }) => {
            kill_and_reap(agent_pid);
            return Err(SandboxError::Agent(message));
        }
        Ok(other) => {
            kill_and_reap(agent_pid);
            return Err(SandboxError::Spawn(format!(
                "unexpected launch message {other:?}"
            )));
        }
        Err(e) => {
            kill_and_reap(agent_pid);
            return Err(SandboxError::Spawn(format!("agent did not start: {e}")));
        }
    }
    Ok(Spawned {
        pid: agent_pid,
        conn: OwnedFd::from(conn_shim),
        fdpass: fd_shim,
    })
}

/// Reads the agent's binary into the page cache from the shim, so its pages
/// are charged to the shim's long-lived cgroup: faulted in first by an agent
/// already moved into a pod's cgroup, they would be charged to that pod, keep
/// its memory cgroup alive after the pod is gone (or, reclaimed with it, be
/// read from disk again by the next pod). Costs a page-cache walk when cached.
/// `make link-order` turns it off (`RUND_NO_AGENT_WARMUP`): it reads every
/// page, and the profile is of the pages the agent runs.
fn warm_page_cache(bin: &std::path::Path) {
    use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
    if std::env::var_os("RUND_NO_AGENT_WARMUP").is_some() {
        return;
    }
    let r = std::fs::File::open(bin)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            posix_fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_WILLNEED)
                .map_err(|e| e.to_string())
        });
    if let Err(e) = r {
        tracing::debug!(bin = %bin.display(), %e, "page cache warm-up of the agent");
    }
}

/// Returns the agent pid and whether the agent already said Ready (the
/// launcher and the agent share the socket, so Ready may come first).
fn handshake(
    plan: &SpawnPlan,
    sync: &OwnedFd,
    launcher_pid: i32,
) -> Result<(i32, bool), SandboxError> {
    let kinds: Vec<FdKind> = plan
        .join
        .iter()
        .map(|(t, _)| FdKind::Namespace(t.clone()))
        .collect();
    let fds: Vec<_> = plan.join.iter().map(|(_, fd)| fd.as_fd()).collect();
    let header = FdHeader { seq: 0, fds: kinds };
    fdpass::send(sync.as_fd(), &header, &fds).map_err(|e| SandboxError::Spawn(e.to_string()))?;
    launch::send_json(sync.as_fd(), &plan.config)
        .map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let mut ready = false;
    loop {
        let msg: SyncMsg = launch::recv_json(sync.as_fd())
            .map_err(|e| SandboxError::Spawn(format!("launcher {launcher_pid}: {e}")))?;
        match msg {
            SyncMsg::UsernsReady { pid } => {
                if plan.join.iter().any(|(kind, _)| kind == "user") {
                    idmap::check_maps(pid, &plan.uid_map, &plan.gid_map)?;
                } else {
                    idmap::write_maps(pid, &plan.uid_map, &plan.gid_map)?;
                }
                launch::send_json(sync.as_fd(), &SyncMsg::MapsWritten)
                    .map_err(|e| SandboxError::Spawn(e.to_string()))?;
            }
            SyncMsg::AgentPid { pid } => return Ok((pid, ready)),
            SyncMsg::Ready => ready = true,
            SyncMsg::Error { message } => return Err(SandboxError::Agent(message)),
            other => {
                return Err(SandboxError::Spawn(format!(
                    "unexpected launch message {other:?}"
                )))
            }
        }
    }
}

fn seqpacket() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SandboxError::Spawn(format!("socketpair: {e}")))
}

/// Moves the three inherited fds to 3, 4 and 5 without CLOEXEC. Runs in the
/// forked child: only async-signal-safe calls.
fn remap_fds(fds: &[RawFd; 3]) -> std::io::Result<()> {
    // First lift every source above 5 so a dup2 cannot clobber a later source.
    let mut high = [0 as RawFd; 3];
    for (i, fd) in fds.iter().enumerate() {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an fd we own; returns a new fd or -1.
        let n = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 10) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        high[i] = n;
    }
    for (i, fd) in high.iter().enumerate() {
        // SAFETY: dup2 onto fds 3..=5; dup2 clears CLOEXEC on the target.
        if unsafe { libc::dup2(*fd, launch::CONN_FD + i as i32) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Moves `fd` above 3-5, the numbers the child's dup2s overwrite, so the exec
/// path `/proc/self/fd/N` survives them. The lowest such number: a higher
/// floor fails (EINVAL) whenever RLIMIT_NOFILE is below it.
fn high_fd(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an fd we own; returns a new fd or -1.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 6) };
    if n < 0 {
        return Err(SandboxError::Spawn(format!(
            "dup agent binary fd: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: a fresh fd from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Kills a process we started and reaps it if it is our child.
pub fn kill_and_reap(pid: i32) {
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
}
