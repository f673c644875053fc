//! Starting `rund-agent launch` and driving the launch handshake
//! (see `rund_proto::launch` for the protocol).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

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

/// A launch under way on a thread of its own ([`spawn_detached`]), with
/// what it launched.
pub type Detached = tokio::sync::oneshot::Receiver<Result<(Spawned, Launched), SandboxError>>;

/// [`spawn`] on a thread of its own, for a caller that has no runtime yet
/// (a per-pod server's head start, before its runtime is built). `prepare`
/// makes the plan on that thread too (it may lease ids or open namespaces).
pub fn spawn_detached(
    prepare: impl FnOnce() -> Result<SpawnPlan, SandboxError> + Send + 'static,
) -> Detached {
    let (tx, rx) = tokio::sync::oneshot::channel();
    // A thread that fails to start drops `tx`: the receiver then errs.
    let _ = std::thread::Builder::new()
        .name("rund-launch".into())
        .spawn(move || {
            let launched = prepare().and_then(|plan| {
                let what = Launched::of(&plan);
                spawn_blocking(plan).map(|s| (s, what))
            });
            if let Err(Ok((spawned, _))) = tx.send(launched) {
                // Nobody waits any more: the agent must not outlive that.
                kill_and_reap(spawned.pid);
            }
            rund_sys::trim::thread_exit();
        });
    rx
}

/// The agent a [`spawn_detached`] launch started.
pub async fn detached(launch: Detached) -> Result<(Spawned, Launched), SandboxError> {
    launch
        .await
        .map_err(|_| SandboxError::Spawn("the launch thread did not start".into()))?
}

/// What a launch was made with, less the fds: two launches with equal
/// `Launched` make the same sandbox (the joined namespaces by identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    config: LaunchConfig,
    join: Vec<(String, Option<(u64, u64)>)>,
    uid_map: Vec<IdMapping>,
    gid_map: Vec<IdMapping>,
    agent_bin: PathBuf,
}

impl Launched {
    pub fn of(plan: &SpawnPlan) -> Launched {
        let id = |fd: &OwnedFd| nix::sys::stat::fstat(fd).ok().map(|s| (s.st_dev, s.st_ino));
        Launched {
            config: plan.config.clone(),
            join: plan
                .join
                .iter()
                .map(|(k, fd)| (k.clone(), id(fd)))
                .collect(),
            uid_map: plan.uid_map.clone(),
            gid_map: plan.gid_map.clone(),
            agent_bin: plan.agent_bin.clone(),
        }
    }
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

    // posix_spawn (vfork-like): no copy of the shim's page tables, and no
    // copy-on-write faults for its other threads while the child execs.
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", exe.as_raw_fd()))
        .map_err(|e| SandboxError::Spawn(e.to_string()))?;
    let mut fds = vec![
        (conn_agent.as_fd(), launch::CONN_FD),
        (fd_agent.as_fd(), launch::CONN_FD + 1),
        (sync_agent.as_fd(), launch::CONN_FD + 2),
    ];
    if let Some(log) = &plan.log {
        fds.push((log.as_fd(), libc::STDERR_FILENO));
    }
    let launcher = rund_sys::spawn::spawn_with_fds(&path, &[c"rund-agent", c"launch"], &fds)
        .map_err(|e| SandboxError::Spawn(format!("exec {}: {e}", plan.agent_bin.display())))?;
    drop(fds);
    drop(fd_agent);
    drop(sync_agent);
    drop(conn_agent);
    drop(exe);
    let launcher_pid = launcher.as_raw();

    let result = handshake(&plan, &sync_shim, launcher_pid);
    // The launcher exits right after the handshake; reap it either way.
    if result.is_err() {
        let _ = nix::sys::signal::kill(launcher, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = nix::sys::wait::waitpid(launcher, None);
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
    // A launcher that died early fails a send (EPIPE) as well as a receive:
    // either way the error names the launcher.
    let lost =
        |e: &dyn std::fmt::Display| SandboxError::Spawn(format!("launcher {launcher_pid}: {e}"));
    let header = FdHeader { seq: 0, fds: kinds };
    fdpass::send(sync.as_fd(), &header, &fds).map_err(|e| lost(&e))?;
    launch::send_json(sync.as_fd(), &plan.config).map_err(|e| lost(&e))?;
    let mut ready = false;
    loop {
        let msg: SyncMsg = launch::recv_json(sync.as_fd()).map_err(|e| lost(&e))?;
        match msg {
            SyncMsg::UsernsReady { pid } => {
                if plan.join.iter().any(|(kind, _)| kind == "user") {
                    idmap::check_maps(pid, &plan.uid_map, &plan.gid_map)?;
                } else {
                    idmap::write_maps(pid, &plan.uid_map, &plan.gid_map)?;
                }
                launch::send_json(sync.as_fd(), &SyncMsg::MapsWritten).map_err(|e| lost(&e))?;
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

/// Moves `fd` above 3-5, the numbers the child's dup2s overwrite, so the exec
/// path `/proc/self/fd/N` survives them. The lowest such number: a higher
/// floor fails (EINVAL) whenever RLIMIT_NOFILE is below it.
fn high_fd(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    rund_sys::spawn::dup_above(fd.as_fd(), launch::CONN_FD + 3)
        .map_err(|e| SandboxError::Spawn(format!("dup agent binary fd: {e}")))
}

/// Kills a process we started and reaps it if it is our child.
pub fn kill_and_reap(pid: i32) {
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
}

#[cfg(test)]
mod tests {
    use super::super::warm::{launch_plan, Template};
    use super::*;

    fn plan(agent_bin: &str) -> SpawnPlan {
        let template = Template {
            agent_bin: agent_bin.into(),
            debug: false,
            trim_after_ms: 0,
            root_template: None,
        };
        launch_plan(&template, false)
    }

    /// A head start begins before the server has a runtime: the launch
    /// runs on its own thread and its error comes back through the channel.
    #[test]
    fn a_detached_launch_runs_without_a_runtime_and_reports_a_missing_agent() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("rund-agent");
        let plan = plan(missing.to_str().unwrap());
        let err = spawn_detached(move || Ok(plan))
            .blocking_recv()
            .unwrap()
            .err()
            .unwrap();
        assert!(err.to_string().contains("rund-agent"), "{err}");
    }

    /// A launcher that exits at once (not an agent) fails the handshake, and
    /// is reaped: no child of ours is left.
    #[test]
    fn a_launcher_that_exits_fails_the_handshake_and_is_reaped() {
        let plan = plan("/bin/true");
        let err = spawn_detached(move || Ok(plan))
            .blocking_recv()
            .unwrap()
            .err()
            .unwrap();
        assert!(err.to_string().contains("launcher"), "{err}");
        // No child of this process (of any of its threads) is the launcher.
        let zombies: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .filter(|pid| {
                // Exec'd as /proc/self/fd/N, the launcher's comm is N.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let comm = stat.split(['(', ')']).nth(1).unwrap_or_default();
                !comm.is_empty() && comm.bytes().all(|b| b.is_ascii_digit())
            })
            .collect();
        assert!(zombies.is_empty(), "unreaped: {zombies:?}");
    }

    /// A plan that cannot be made (say, its ids cannot be leased) is the
    /// launch's error; nothing is spawned.
    #[test]
    fn a_plan_that_fails_is_the_launchs_error() {
        let err = spawn_detached(|| Err(SandboxError::Spawn("no ids".into())))
            .blocking_recv()
            .unwrap()
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            SandboxError::Spawn("no ids".into()).to_string()
        );
    }

    /// Two launches are the same only with the same namespaces joined, by
    /// identity, not by path or fd number.
    #[test]
    fn launches_compare_by_config_maps_and_namespace_identity() {
        let with = |net: &str| {
            let mut p = plan("/x");
            p.join = vec![("net".into(), std::fs::File::open(net).unwrap().into())];
            p
        };
        let a = Launched::of(&with("/proc/self/ns/net"));
        assert_eq!(a, Launched::of(&with("/proc/self/ns/net")));
        assert_ne!(a, Launched::of(&with("/proc/self/ns/ipc")));
        let mut other = with("/proc/self/ns/net");
        other.config.hostname = Some("h".into());
        assert_ne!(a, Launched::of(&other));
        let mut mapped = with("/proc/self/ns/net");
        mapped.uid_map = vec![IdMapping {
            container_id: 0,
            host_id: 1_000_000,
            size: 65536,
        }];
        assert_ne!(a, Launched::of(&mapped));
    }
}
