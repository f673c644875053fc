//! A per-pod shim's head start (`[sandbox] head_start`): the server
//! launches one agent in the warm template ([`warm::launch_config`]) as it
//! starts, so the launch runs while containerd is still reading `start`'s
//! reply, connecting and sending Create. The pod's first Create claims it
//! like a warm agent if the pod fits the template; otherwise it is killed.
//! A per-pod shim starts one sandbox, so the agent is never replaced. If the
//! shim dies first, the agent sees its socketpair close and exits.

use std::path::Path;
use std::sync::Mutex;

use tokio::task::JoinHandle;

use super::warm::{self, Template};
use super::{spawn, Agent, SandboxError};

type Launch = JoinHandle<Result<Agent, SandboxError>>;

pub struct HeadStart {
    agent_bin: std::path::PathBuf,
    launch: Mutex<Option<Launch>>,
}

impl HeadStart {
    /// Starts the launch in the background (call inside the runtime).
    pub fn launch(template: Template) -> HeadStart {
        let agent_bin = template.agent_bin.clone();
        let launch = tokio::spawn(async move { warm::launch(&template).await });
        tracing::debug!("head start: launching the pod's agent");
        HeadStart {
            agent_bin,
            launch: Mutex::new(Some(launch)),
        }
    }

    fn take_launch(&self) -> Option<Launch> {
        self.launch.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The agent, waiting for its launch to end, for a pod that fits the
    /// template and runs `agent_bin`. `None` once taken, when the binary
    /// differs (the agent is then killed) or when the launch failed (the pod
    /// starts cold, and reports its own launch's error if that fails too).
    pub async fn take(&self, agent_bin: &Path) -> Option<Agent> {
        let launch = self.take_launch()?;
        if agent_bin != self.agent_bin {
            discard(launch);
            return None;
        }
        match launch.await {
            Ok(Ok(agent)) => Some(agent),
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
