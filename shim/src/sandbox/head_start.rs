//! A per-pod shim's head start (`[sandbox] head_start`): the server
//! launches one agent in the warm template ([`warm::launch_config`]) first
//! thing after its fork ([`Early`]), so the launch runs while the server
//! sets up and containerd reads `start`'s reply, connects and sends Create.
//! The pod's first Create claims it like a warm agent if the pod fits the
//! template; otherwise it is killed.
//! `start` reads the pod's spec, so an agent for a pod that wants a network
//! namespace of its own makes it at launch, off the Create's path.
//! A per-pod shim starts one sandbox, so the agent is never replaced. If the
//! shim dies first, the agent sees its socketpair close and exits.

use std::path::Path;
use std::sync::Mutex;

use tokio::task::JoinHandle;

use super::warm::{self, Template};
use super::{spawn, Agent, SandboxError};

type Launch = JoinHandle<Result<Agent, SandboxError>>;

/// What `start` judged from the pod's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The pod wants a network namespace of its own (none to join).
    pub new_net: bool,
}

/// A head start begun before the server's runtime exists: the agent's
/// fork, exec and handshake run on a thread of their own while the server
/// builds its runtime, opens its log and binds its socket.
pub struct Early {
    agent_bin: std::path::PathBuf,
    plan: Plan,
    launch: spawn::Detached,
}

impl Early {
    /// Starts the launch; the shim's log must be open (the agent's stderr).
    pub fn begin(template: &Template, plan: Plan) -> Early {
        let launch = spawn::spawn_detached(warm::launch_plan(template, plan.new_net));
        Early {
            agent_bin: template.agent_bin.clone(),
            plan,
            launch,
        }
    }
}

pub struct HeadStart {
    agent_bin: std::path::PathBuf,
    new_net: bool,
    launch: Mutex<Option<Launch>>,
}

impl HeadStart {
    /// Connects to the early launch's agent in the background (call inside
    /// the runtime).
    pub fn launch(early: Early) -> HeadStart {
        let Early {
            agent_bin,
            plan,
            launch,
        } = early;
        let launch =
            tokio::spawn(async move { warm::connect(spawn::detached(launch).await?).await });
        if plan.new_net {
            tracing::debug!(
                "head start: launching the pod's agent, in a network namespace of its own"
            );
        } else {
            tracing::debug!(
                "head start: launching the pod's agent, in the node's network namespace"
            );
        }
        HeadStart {
            agent_bin,
            new_net: plan.new_net,
            launch: Mutex::new(Some(launch)),
        }
    }

    fn take_launch(&self) -> Option<Launch> {
        self.launch.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The agent, waiting for its launch to end, for a pod that fits the
    /// template, runs `agent_bin` and wants a new network namespace or not
    /// (`new_net`), with whether it made that namespace at launch. `None`
    /// once taken, when the binary differs or the agent has a namespace the
    /// pod does not want (the agent is then killed), or when the launch
    /// failed (the pod starts cold, and reports its own launch's error if
    /// that fails too).
    pub async fn take(&self, agent_bin: &Path, new_net: bool) -> Option<(Agent, bool)> {
        let launch = self.take_launch()?;
        if agent_bin != self.agent_bin || (self.new_net && !new_net) {
            discard(launch);
            return None;
        }
        match launch.await {
            Ok(Ok(agent)) => Some((agent, self.new_net)),
            Ok(Err(e)) => {
                tracing::warn!("head start: launching the agent failed ({e}): starting cold");
                None
            }
            Err(e) => {
                tracing::warn!("head start: launch task: {e}: starting cold");
                None
            }
        }
    }

    /// The pod did not take the agent: it is killed once launched.
    pub fn discard(&self) {
        if let Some(launch) = self.take_launch() {
            discard(launch);
        }
    }
}

fn discard(launch: Launch) {
    tokio::spawn(async move {
        if let Ok(Ok(agent)) = launch.await {
            tracing::debug!(pid = agent.pid, "head start: agent not claimed, killed");
            spawn::kill_and_reap(agent.pid);
        }
    });
}
