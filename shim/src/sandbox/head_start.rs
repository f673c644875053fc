//! A per-pod shim's head start (`[sandbox] head_start`): the server
//! launches one agent in the warm template ([`warm::launch_config`]) first
//! thing after its fork ([`Early`]), so the launch runs while the server
//! sets up and containerd reads `start`'s reply, connects and sends Create.
//! The pod's first Create claims it like a warm agent if the pod fits the
//! template; otherwise it is killed. A pod the template does not fit (a user
//! namespace, hostPID, a joined namespace other than the network's) gets an
//! agent of its own instead, launched with the very plan its Create would
//! make (its leased ids included); the Create takes it if its plan is the same.
//! `start` reads the pod's spec, so an agent for a pod that wants a network
//! namespace of its own makes it at launch, off the Create's path.
//! A per-pod shim starts one sandbox, so the agent is never replaced. If the
//! shim dies first, the agent sees its socketpair close and exits.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::task::JoinHandle;

use super::spawn::{Launched, SpawnPlan};
use super::warm::{self, Template};
use super::{spawn, Agent, SandboxError};

type Launch = JoinHandle<Result<(Agent, Launched), SandboxError>>;

/// What `start` judged from the pod's spec, for a pod that fits the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The pod wants a network namespace of its own (none to join).
    pub new_net: bool,
}

/// Which agent a head start launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One in the warm template, which the pod claims.
    Template { new_net: bool },
    /// The pod's own, launched as its Create would launch it (a pod the
    /// template does not fit, such as a user-namespaced one): the Create
    /// takes it only if its own launch would be the same.
    Own,
}

/// A head start begun before the server's runtime exists: the agent's
/// fork, exec and handshake run on a thread of their own while the server
/// builds its runtime, opens its log and binds its socket.
pub struct Early {
    agent_bin: PathBuf,
    kind: Kind,
    launch: spawn::Detached,
}

impl Early {
    /// Starts the launch; the shim's log must be open (the agent's stderr).
    pub fn begin(template: &Template, plan: Plan) -> Early {
        let spawn_plan = warm::launch_plan(template, plan.new_net);
        Early {
            agent_bin: template.agent_bin.clone(),
            kind: Kind::Template {
                new_net: plan.new_net,
            },
            launch: spawn::spawn_detached(move || Ok(spawn_plan)),
        }
    }

    /// Starts the pod's own launch; `prepare` makes its plan on the launch
    /// thread. The shim's log must be open.
    pub fn begin_own(
        agent_bin: PathBuf,
        prepare: impl FnOnce() -> Result<SpawnPlan, SandboxError> + Send + 'static,
    ) -> Early {
        Early {
            agent_bin,
            kind: Kind::Own,
            launch: spawn::spawn_detached(prepare),
        }
    }

    /// For a server that fails before it serves: waits for the launch (it
    /// may be mid-fork) and kills its agent, so nothing outlives the server.
    pub async fn abandon(self) {
        if let Ok((spawned, _)) = spawn::detached(self.launch).await {
            spawn::kill_and_reap(spawned.pid);
        }
    }
}

pub struct HeadStart {
    agent_bin: PathBuf,
    kind: Kind,
    launch: Mutex<Option<Launch>>,
}

impl HeadStart {
    /// Connects to the early launch's agent in the background (call inside
    /// the runtime).
    pub fn launch(early: Early) -> HeadStart {
        let Early {
            agent_bin,
            kind,
            launch,
        } = early;
        let launch = tokio::spawn(async move {
            let (spawned, launched) = spawn::detached(launch).await?;
            Ok((warm::connect(spawned).await?, launched))
        });
        match kind {
            Kind::Template { new_net: true } => tracing::debug!(
                "head start: launching the pod's agent, in a network namespace of its own"
            ),
            Kind::Template { new_net: false } => tracing::debug!(
                "head start: launching the pod's agent, in the node's network namespace"
            ),
            Kind::Own => {
                tracing::debug!("head start: launching the pod's agent, as its Create would")
            }
        }
        HeadStart {
            agent_bin,
            kind,
            launch: Mutex::new(Some(launch)),
        }
    }

    fn take_launch(&self) -> Option<Launch> {
        self.launch.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The agent, waiting for its launch to end, for a pod that fits the
    /// template, runs `agent_bin` and wants a new network namespace or not
    /// (`new_net`), with whether it made that namespace at launch. `None`
    /// for a pod's own launch (left for [`HeadStart::discard`]), once taken,
    /// when the binary differs or the agent has a namespace the pod does
    /// not want (the agent is then killed), or when the launch failed (the
    /// pod starts cold, and reports its own launch's error if that fails too).
    pub async fn take(&self, agent_bin: &Path, new_net: bool) -> Option<(Agent, bool)> {
        let Kind::Template { new_net: made } = self.kind else {
            return None;
        };
        let launch = self.take_launch()?;
        if agent_bin != self.agent_bin || (made && !new_net) {
            discard(launch);
            return None;
        }
        awaited(launch).await.map(|(agent, _)| (agent, made))
    }

    /// The pod's own agent, if its launch was `want` (config, id maps,
    /// binary and the very namespaces joined); else `None`, and an agent
    /// launched otherwise is killed.
    pub async fn take_own(&self, want: &SpawnPlan) -> Option<Agent> {
        if self.kind != Kind::Own {
            return None;
        }
        let launch = self.take_launch()?;
        let (agent, launched) = awaited(launch).await?;
        if launched != Launched::of(want) {
            tracing::debug!(
                pid = agent.pid,
                "head start: the Create launches otherwise; agent killed"
            );
            spawn::kill_and_reap(agent.pid);
            return None;
        }
        Some(agent)
    }

    /// As [`Early::abandon`], for a launch already handed to the service.
    pub async fn abandon(&self) {
        if let Some(launch) = self.take_launch() {
            kill_once_launched(launch).await;
        }
    }

    /// The pod did not take the agent: it is killed once launched.
    pub fn discard(&self) {
        if let Some(launch) = self.take_launch() {
            discard(launch);
        }
    }
}

async fn awaited(launch: Launch) -> Option<(Agent, Launched)> {
    match launch.await {
        Ok(Ok(got)) => Some(got),
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

fn discard(launch: Launch) {
    tokio::spawn(kill_once_launched(launch));
}

async fn kill_once_launched(launch: Launch) {
    if let Ok(Ok((agent, _))) = launch.await {
        tracing::debug!(pid = agent.pid, "head start: agent not claimed, killed");
        spawn::kill_and_reap(agent.pid);
    }
}
