//! The sandbox: one `rund-agent` (PID 1 of new namespaces) per pod, spawned
//! and driven by the shim.
//!
//! [`Sandbox`] is a live sandbox as the shim sees it: the agent, its
//! namespaces, and its exit (the agent is our child once the launcher
//! exits: we are a subreaper).

pub mod agent;
pub mod fostered;
pub mod head_start;
pub mod pidmap;
pub mod spawn;
pub mod warm;

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use rund_sys::ns as nsfd;
use spawn::SpawnPlan;
use tokio::sync::watch;

pub use agent::Agent;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("starting the sandbox agent: {0}")]
    Spawn(String),
    #[error("sandbox agent: {0}")]
    Agent(String),
    #[error("user namespace mapping: {0}")]
    IdMap(#[from] crate::userns::idmap::IdMapError),
    #[error("agent rpc {rpc}: {status}")]
    Rpc {
        rpc: &'static str,
        status: ttrpc::Error,
    },
    #[error("passing fds to the agent: {0}")]
    FdPass(#[from] rund_proto::fdpass::FdPassError),
    #[error("finding the host pid of agent pid {0}: {1}")]
    PidLookup(u32, pidmap::PidMapError),
    #[error("{0}")]
    Namespace(String),
    #[error("the sandbox agent has exited")]
    Gone,
}

/// Opens the namespace file `path`, which must be of `kind`.
pub fn open_ns(kind: &str, path: &std::path::Path) -> Result<std::os::fd::OwnedFd, SandboxError> {
    rund_sys::ns::open_ns(kind, path).map_err(|e| {
        SandboxError::Namespace(format!("namespace path {} for {kind}: {e}", path.display()))
    })
}

/// The sandbox's user namespace, when it has one.
pub struct UsernsInfo {
    /// Host uid/gid of container root.
    pub host_root: u32,
    /// Leased id range, released when the sandbox goes.
    pub lease: Option<crate::userns::LeaseStore>,
}

/// What the shim knows of a sandbox before its agent runs.
#[derive(Clone)]
pub struct About {
    pub id: String,
    pub grace: Duration,
    pub userns: bool,
    /// The sandbox makes its own network namespace.
    pub owns_net: bool,
    pub host_pid: bool,
}

pub struct Sandbox {
    pub id: String,
    pub agent: Agent,
    pub grace: Duration,
    pub userns: bool,
    pub userns_info: Option<UsernsInfo>,
    /// The sandbox made its own network namespace (so, under a user
    /// namespace, containers can mount sysfs).
    pub owns_net: bool,
    /// hostPID: the agent runs in the host pid namespace.
    pub host_pid: bool,
    ns_ids: HashMap<String, (u64, u64)>,
    exit: watch::Sender<Option<(u32, i64)>>,
    /// The node keeper's copies of the agent's sockets (per-node mode),
    /// given back when the sandbox goes.
    pub kept: std::sync::Mutex<Option<Box<dyn Send + Sync>>>,
}

impl Sandbox {
    pub async fn start(
        plan: SpawnPlan,
        about: About,
        userns_info: Option<UsernsInfo>,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let spawned = spawn::spawn(plan).await?;
        let pid = spawned.pid;
        let agent = match Agent::connect(spawned).await {
            Ok(a) => a,
            Err(e) => {
                spawn::kill_and_reap(pid);
                return Err(e);
            }
        };
        Self::serve(agent, about, userns_info)
    }

    /// Serves an agent launched with this pod's own plan (a head start the
    /// pod's Create took).
    pub fn launched(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        Self::serve(agent, about, userns_info)
    }

    /// Makes a warm agent this pod's sandbox (`ClaimSandbox`). On error the
    /// agent is killed: half-claimed, it belongs to no pod.
    pub async fn claim(
        agent: Agent,
        about: About,
        claim: &warm::ClaimPlan,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let net = claim.net.as_ref().map(|fd| fd.as_fd());
        let r = agent
            .claim(
                &about.id,
                net,
                about.owns_net && !claim.net_made,
                claim.hostname.as_deref(),
                &claim.sysctls,
            )
            .await;
        if let Err(e) = r {
            spawn::kill_and_reap(agent.pid);
            return Err(e);
        }
        Self::serve(agent, about, None)
    }

    /// Serves an agent a dead node shim started (see [`Agent::adopt`]); its
    /// exit status comes from `fostered`, as the keeper reaps it.
    pub fn adopt(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
        fostered: Arc<fostered::Fostered>,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        Self::serve_with(agent, about, userns_info, Some(fostered))
    }

    /// A sandbox whose agent died while no node shim served it: it has
    /// ended, with the status the keeper reaped (see [`Agent::gone`]).
    pub fn gone(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
        status: u32,
    ) -> Arc<Sandbox> {
        let exit = Some((status, crate::clock::now_ns()));
        Arc::new(Self::new(agent, about, userns_info, HashMap::new(), exit))
    }

    fn new(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
        ns_ids: HashMap<String, (u64, u64)>,
        exit: Option<(u32, i64)>,
    ) -> Sandbox {
        Sandbox {
            id: about.id,
            agent,
            grace: about.grace,
            userns: about.userns,
            userns_info,
            owns_net: about.owns_net,
            host_pid: about.host_pid,
            ns_ids,
            exit: watch::channel(exit).0,
            kept: Default::default(),
        }
    }

    fn serve(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        Self::serve_with(agent, about, userns_info, None)
    }

    fn serve_with(
        agent: Agent,
        about: About,
        userns_info: Option<UsernsInfo>,
        fostered: Option<Arc<fostered::Fostered>>,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let pid = agent.pid;
        let mut ns_ids = HashMap::new();
        for kind in ["pid", "net", "ipc", "uts", "cgroup", "user"] {
            if let Some(idv) = nsfd::ns_id(Path::new(&format!("/proc/{pid}/ns/{kind}"))) {
                ns_ids.insert(kind.to_string(), idv);
            }
        }
        if let Some(lease) = userns_info.as_ref().and_then(|u| u.lease.as_ref()) {
            // The lease now lives as long as the agent.
            if let Err(e) = lease.adopt(&about.id, pid) {
                tracing::warn!(sandbox = %about.id, "userns lease adopt: {e}");
            }
        }
        let sandbox = Arc::new(Self::new(agent, about, userns_info, ns_ids, None));
        if let Err(e) = watch_agent(sandbox.clone(), fostered) {
            spawn::kill_and_reap(pid);
            return Err(e);
        }
        Ok(sandbox)
    }

    pub fn pid(&self) -> i32 {
        self.agent.pid
    }

    /// Is `path` the sandbox's own namespace of `kind`?
    pub fn is_own_ns(&self, kind: &str, path: &Path) -> bool {
        match (self.ns_ids.get(kind), nsfd::ns_id(path)) {
            (Some(a), Some(b)) => *a == b,
            _ => false,
        }
    }

    pub fn exited(&self) -> Option<(u32, i64)> {
        *self.exit.borrow()
    }

    /// Waits for the agent to exit: (exit status, time in ns).
    pub async fn wait_exit(&self) -> (u32, i64) {
        let mut rx = self.exit.subscribe();
        loop {
            if let Some(e) = *rx.borrow_and_update() {
                return e;
            }
            if rx.changed().await.is_err() {
                return (255, crate::clock::now_ns());
            }
        }
    }

    /// TERM, grace, KILL inside the sandbox; then make sure the agent is gone.
    pub async fn teardown(&self, grace: Duration) {
        self.stop(grace).await;
        if let Some(lease) = self.userns_info.as_ref().and_then(|u| u.lease.as_ref()) {
            if let Err(e) = lease.release(&self.id) {
                tracing::warn!(sandbox = %self.id, "userns lease release: {e}");
            }
        }
    }

    async fn stop(&self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        let destroyed = self.agent.destroy(grace).await;
        let waited = tokio::time::timeout(Duration::from_secs(5), self.wait_exit()).await;
        match (&destroyed, waited.is_ok()) {
            (Ok(()), _) => {}
            // The agent exits right after answering: a closed connection is
            // the expected end, once it has really exited.
            (Err(e), true) => tracing::debug!(sandbox = %self.id, "DestroySandbox: {e}"),
            (Err(e), false) => {
                tracing::warn!(sandbox = %self.id, "DestroySandbox: {e}; killing the agent")
            }
        }
        if waited.is_err() {
            let _ = nix::sys::signal::kill(
                Pid::from_raw(self.pid()),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = tokio::time::timeout(Duration::from_secs(5), self.wait_exit()).await;
        }
    }
}

/// Reaps the agent when it exits and records its status.
fn watch_agent(
    sandbox: Arc<Sandbox>,
    fostered: Option<Arc<fostered::Fostered>>,
) -> Result<(), SandboxError> {
    let pid = sandbox.pid();
    let pidfd = rund_sys::process::pidfd_open(pid).map_err(|e| {
        SandboxError::Spawn(format!("pidfd_open({pid}): {}", std::io::Error::from(e)))
    })?;
    let fd = crate::io::async_fd(pidfd).map_err(|e| SandboxError::Spawn(format!("pidfd: {e}")))?;
    tokio::spawn(async move {
        let _ = fd.readable().await;
        let status = match (&fostered, waitpid(Pid::from_raw(pid), None)) {
            (_, Ok(WaitStatus::Exited(_, code))) => code as u32,
            (_, Ok(WaitStatus::Signaled(_, sig, _))) => 128 + sig as u32,
            (Some(f), Err(nix::errno::Errno::ECHILD)) => f.status(pid).await,
            _ => 255,
        };
        if status == 0 {
            tracing::debug!(sandbox = %sandbox.id, pid, "sandbox agent exited");
        } else {
            tracing::info!(sandbox = %sandbox.id, pid, status, "sandbox agent exited");
        }
        sandbox
            .exit
            .send_replace(Some((status, crate::clock::now_ns())));
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn about() -> About {
        About {
            id: "gone".into(),
            grace: Duration::from_secs(1),
            userns: false,
            owns_net: false,
            host_pid: false,
        }
    }

    /// A gone sandbox has ended, fails its requests at once, and never
    /// signals its recorded pid: the keeper reaped it, and the number may
    /// name another process by now (here: a live child of ours).
    #[tokio::test]
    async fn a_gone_sandbox_has_ended_and_touches_no_pid() {
        let mut other = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = other.id() as i32;
        let sb = Sandbox::gone(Agent::gone(pid).unwrap(), about(), None, 137);
        assert_eq!(sb.exited().map(|e| e.0), Some(137));
        assert_eq!(sb.wait_exit().await.0, 137);
        let listed = tokio::time::timeout(Duration::from_secs(5), sb.agent.list_pids("c")).await;
        assert!(
            matches!(listed, Ok(Err(_))),
            "a request to a gone agent fails"
        );
        tokio::time::timeout(Duration::from_secs(5), sb.teardown(Duration::from_secs(1)))
            .await
            .expect("teardown of a gone sandbox waits for nothing");
        assert!(
            other.try_wait().unwrap().is_none(),
            "the pid was not signalled"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
