//! Sandbox teardown: TERM (by disposition for a namespace PID 1), the grace
//! period, then KILL of whatever is left.

use std::time::Duration;

use super::signal::{self, Plan};
use super::state::descendants;
use super::AgentService;
use crate::reaper::ExitRx;

pub async fn sandbox(svc: &AgentService, grace: Duration) {
    crate::debug!("destroying the sandbox (grace {}s)", grace.as_secs());
    let waits = term_all(svc);
    let all = |mut waits: Vec<ExitRx>| async move {
        for w in waits.iter_mut() {
            let _ = w.wait_for(|e| e.is_some()).await;
        }
    };
    if tokio::time::timeout(grace, all(waits.clone()))
        .await
        .is_err()
    {
        crate::info!("grace period over: killing what is left");
    }
    kill_all(svc);
    let _ = tokio::time::timeout(Duration::from_secs(10), all(waits)).await;
    svc.reaper.reap_all();
}

/// TERM to every live process; returns their exit receivers.
fn term_all(svc: &AgentService) -> Vec<ExitRx> {
    if let Some(p) = svc
        .pod_pid
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        let _ = signal::send(p.pid.as_raw(), libc::SIGTERM);
    }
    let mut st = svc.state();
    let mut waits = Vec::new();
    for c in st.containers.values_mut() {
        for p in std::iter::once(&mut c.init).chain(c.execs.values_mut()) {
            if p.exited() {
                continue;
            }
            let pid = p.pid.as_raw();
            let plan = if p.ns_init {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                signal::plan(libc::SIGTERM, &status)
            } else {
                Plan::Send(libc::SIGTERM)
            };
            match plan {
                Plan::Send(s) => {
                    let _ = signal::send(pid, s);
                }
                Plan::KillFor(s) => {
                    p.killed_for = Some(s);
                    let _ = signal::send(pid, libc::SIGKILL);
                }
                Plan::Nothing => {}
            }
            waits.push(p.exit.clone());
        }
    }
    waits
}

/// KILL to everything in the sandbox. As PID 1 of the sandbox's pid
/// namespace, kill(-1) reaches every other process in it. In the host pid
/// namespace (hostPID) it would reach the whole node: there the agent, a
/// subreaper, kills its own descendants (orphans are reparented to it).
pub fn kill_all(svc: &AgentService) {
    if !svc.host_pid {
        let _ = signal::send(-1, libc::SIGKILL);
        return;
    }
    for pid in descendants(std::process::id() as i32) {
        let _ = signal::send(pid, libc::SIGKILL);
    }
}
