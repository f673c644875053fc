//! Warm sandboxes (`[sandbox] warm = N`, per-node mode): agents launched
//! ahead of any pod, in their own pid, ipc, uts and mount namespaces, each
//! waiting on its socketpair. A pod that fits the template claims one with
//! one RPC (`ClaimSandbox`: its network namespace, hostname and sysctls)
//! instead of a launch; the pool refills in the background, one agent at a
//! time. A warm agent's only link is the node shim's end of its socketpair:
//! if the node's shim dies, every warm agent sees it close and exits.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rund_proto::launch::LaunchConfig;

use super::spawn::{self, SpawnPlan};
use super::{Agent, SandboxError};

/// What the pod tells a warm agent at its claim.
pub struct ClaimPlan {
    /// The network namespace to join; none: `About::owns_net` says whether
    /// to make one or stay in the node's.
    pub net: Option<OwnedFd>,
    /// The agent made the pod's network namespace at launch (a head start).
    pub net_made: bool,
    pub hostname: Option<String>,
    pub sysctls: Vec<(String, String)>,
}

/// How warm agents are launched.
#[derive(Debug, Clone)]
pub struct Template {
    pub agent_bin: PathBuf,
    pub debug: bool,
    pub trim_after_ms: u64,
    /// The node's agent-root template (`[sandbox] root_template`).
    pub root_template: Option<String>,
}

impl Template {
    /// The template a shim's config gives: its agent binary and idle trim.
    pub fn of(config: &crate::config::RundConfig, debug: bool) -> Template {
        Template {
            agent_bin: config.agent_binary(),
            debug,
            trim_after_ms: config.idle.trim_after_ms,
            root_template: config.sandbox.root_template(),
        }
    }
}

/// The refill waits this long after the last claim: pods that come in a
/// burst keep the CPU, and the pool catches up after it.
const QUIET: Duration = Duration::from_millis(100);

pub struct WarmPool {
    want: usize,
    template: Template,
    ready: Mutex<VecDeque<Agent>>,
    filling: AtomicBool,
    closed: AtomicBool,
    last_claim: Mutex<Option<Instant>>,
}

impl WarmPool {
    pub fn new(want: usize, template: Template) -> Arc<WarmPool> {
        Arc::new(WarmPool {
            want,
            template,
            ready: Mutex::new(VecDeque::new()),
            filling: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            last_claim: Mutex::new(None),
        })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, VecDeque<Agent>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Live warm agents now.
    pub fn len(&self) -> usize {
        let mut ready = self.ready();
        ready.retain(alive);
        ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A live warm agent launched with `agent_bin`, if one waits. The pool
    /// refills behind it.
    pub fn take(self: &Arc<Self>, agent_bin: &Path) -> Option<Agent> {
        if agent_bin != self.template.agent_bin {
            return None;
        }
        *self.last_claim.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let taken = {
            let mut ready = self.ready();
            loop {
                match ready.pop_front() {
                    Some(a) if alive(&a) => break Some(a),
                    Some(_) => continue,
                    None => break None,
                }
            }
        };
        self.refill();
        taken
    }

    /// How long until [`QUIET`] has passed since the last claim.
    fn until_quiet(&self) -> Option<Duration> {
        let last = (*self.last_claim.lock().unwrap_or_else(|e| e.into_inner()))?;
        QUIET.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }

    /// Launches agents until `want` wait, in the background, one at a time
    /// and only once claims have been quiet for [`QUIET`].
    pub fn refill(self: &Arc<Self>) {
        if self.closed.load(Ordering::Acquire) || self.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            while !pool.closed.load(Ordering::Acquire) && pool.len() < pool.want {
                if let Some(wait) = pool.until_quiet() {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                match launch(&pool.template, false).await {
                    Ok(agent) => {
                        if pool.closed.load(Ordering::Acquire) {
                            spawn::kill_and_reap(agent.pid);
                            break;
                        }
                        tracing::debug!(pid = agent.pid, "warm agent ready");
                        pool.ready().push_back(agent);
                    }
                    Err(e) => {
                        // Pods still start, cold; the next claim tries again.
                        tracing::warn!("launching a warm agent: {e}");
                        break;
                    }
                }
            }
            pool.filling.store(false, Ordering::Release);
        });
    }

    /// Kills every warm agent (the node's shim is leaving).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for agent in self.ready().drain(..) {
            spawn::kill_and_reap(agent.pid);
        }
    }
}

/// Whether a warm agent still runs; a dead one is reaped here.
fn alive(agent: &Agent) -> bool {
    !matches!(
        waitpid(Pid::from_raw(agent.pid), Some(WaitPidFlag::WNOHANG)),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
    )
}

/// The launch config of a warm agent: what every pod of the template
/// shares, and nothing of any one pod.
/// `new_net`: the agent makes its network namespace now (a head start for a
/// pod that wants a new one); else the claim joins or makes it.
pub fn launch_config(template: &Template, new_net: bool) -> LaunchConfig {
    LaunchConfig {
        sandbox_id: "warm".into(),
        userns: false,
        new_net,
        new_ipc: true,
        new_uts: true,
        host_pid: false,
        hostname: None,
        sysctls: Vec::new(),
        debug: template.debug,
        trim_after_ms: template.trim_after_ms,
        warm: true,
        root_template: template.root_template.clone(),
    }
}

/// How a warm agent is spawned: [`launch_config`], nothing to join, and
/// the shim's log as its stderr.
pub(super) fn launch_plan(template: &Template, new_net: bool) -> SpawnPlan {
    SpawnPlan {
        config: launch_config(template, new_net),
        join: Vec::new(),
        uid_map: Vec::new(),
        gid_map: Vec::new(),
        agent_bin: template.agent_bin.clone(),
        log: crate::logging::agent_log_fd(),
    }
}

pub(super) async fn launch(template: &Template, new_net: bool) -> Result<Agent, SandboxError> {
    connect(spawn::spawn(launch_plan(template, new_net)).await?).await
}

/// The ttrpc client of a spawned agent; the agent is killed if that fails.
pub(super) async fn connect(spawned: spawn::Spawned) -> Result<Agent, SandboxError> {
    let pid = spawned.pid;
    Agent::connect(spawned).await.inspect_err(|_| {
        spawn::kill_and_reap(pid);
    })
}

/// Whether a pod's sandbox can be a warm agent: no user namespace (a warm
/// agent inside one could not join the host-owned network namespace CRI
/// made for the pod), not hostPID, new ipc and uts namespaces, and nothing
/// joined but the network namespace.
pub fn fits(userns: bool, host_pid: bool, new_ipc: bool, new_uts: bool, joined: &[&str]) -> bool {
    !userns && !host_pid && new_ipc && new_uts && joined.iter().all(|k| *k == "net")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_pods_fit_the_template() {
        assert!(fits(false, false, true, true, &[]));
        assert!(fits(false, false, true, true, &["net"]));
        assert!(!fits(true, false, true, true, &[]), "user namespace");
        assert!(!fits(false, true, true, true, &[]), "hostPID");
        assert!(!fits(false, false, false, true, &[]), "hostIPC");
        assert!(!fits(false, false, true, false, &[]), "host uts");
        assert!(
            !fits(false, false, true, true, &["net", "ipc"]),
            "joined ipc"
        );
        assert!(!fits(false, false, true, true, &["user"]), "joined user");
    }

    #[test]
    fn the_launch_config_carries_nothing_of_a_pod() {
        let t = Template {
            agent_bin: "/x".into(),
            debug: true,
            trim_after_ms: 7,
            root_template: Some("/run/x".into()),
        };
        let c = launch_config(&t, false);
        assert!(c.warm && c.new_ipc && c.new_uts);
        assert!(!c.userns && !c.new_net && !c.host_pid);
        assert!(c.hostname.is_none() && c.sysctls.is_empty());
        assert_eq!((c.debug, c.trim_after_ms), (true, 7));
        assert_eq!(c.root_template.as_deref(), Some("/run/x"));
        // A head start for a pod that wants its own network namespace.
        let c = launch_config(&t, true);
        assert!(c.warm && c.new_net && !c.userns && c.sandbox_id == "warm");
    }
}
