//! Start, Kill, Wait, Delete, State, Pids, ResizePty.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use containerd_shim_protos::api::Status as ApiStatus;
use containerd_shim_protos::api::{
    DeleteResponse, PidsResponse, StartResponse, StateResponse, WaitResponse,
};
use containerd_shim_protos::ttrpc;
use containerd_shim_protos::types::task::ProcessInfo;

use super::events::timestamp_ns;
use super::state::{Container, ExitInfo, Process, Status};
use super::Service;
use super::TaskError;
use crate::error::{Result, ShimError};
use crate::sandbox::{pidmap, Sandbox};

fn sandbox(svc: &Service) -> Result<Arc<Sandbox>> {
    svc.sandbox().ok_or_else(|| TaskError::SandboxGone.into())
}

fn process(c: &Container, exec_id: &str) -> Result<Arc<Process>> {
    c.process(exec_id).ok_or_else(|| {
        TaskError::ProcessNotFound {
            id: c.id.clone(),
            exec_id: exec_id.into(),
        }
        .into()
    })
}

pub async fn start(svc: &Arc<Service>, id: &str, exec_id: &str) -> Result<StartResponse> {
    crate::failpoint::hit("start", id);
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    if p.started.load(Ordering::SeqCst) {
        return Err(TaskError::AlreadyStarted {
            id: id.into(),
            exec_id: exec_id.into(),
        }
        .into());
    }
    if p.exit().is_some() {
        // Killed while created.
        return Err(TaskError::StartAfterExit {
            id: id.into(),
            exec_id: exec_id.into(),
        }
        .into());
    }
    let sb = sandbox(svc)?;
    if exec_id.is_empty() && !c.is_pod_sandbox {
        super::resources::arm_oom(&c);
    }
    if !c.is_pod_sandbox {
        sb.agent.start_process(id, exec_id).await?;
    }
    p.started.store(true, Ordering::SeqCst);
    if exec_id.is_empty() && !c.is_pod_sandbox {
        // runc's rule: a failed poststart hook kills the container.
        let state = crate::hooks::state_json(&c.spec, id, "running", p.pid() as i32, &c.bundle);
        if let Err(e) = crate::hooks::run(&c.spec, "poststart", &state).await {
            let _ = sb.agent.signal(id, "", libc::SIGKILL as u32).await;
            spawn_exit_watch(svc.clone(), c.clone(), p.clone(), sb);
            return Err(e.into());
        }
    }
    let pid = p.pid();
    if exec_id.is_empty() {
        svc.events.start(id, pid).await;
    } else {
        svc.events.exec_started(id, exec_id, pid).await;
    }
    if exec_id.is_empty() && !c.is_pod_sandbox {
        super::resources::watch_oom(svc.clone(), c.clone());
    }
    // Exit watching starts only now, so TaskExit always follows TaskStart.
    spawn_exit_watch(svc.clone(), c.clone(), p.clone(), sb);
    Ok(StartResponse {
        pid,
        ..Default::default()
    })
}

pub(super) fn spawn_exit_watch(
    svc: Arc<Service>,
    c: Arc<Container>,
    p: Arc<Process>,
    sb: Arc<Sandbox>,
) {
    if !p.claim_exit_watch() {
        return;
    }
    tokio::spawn(async move {
        let exit = if c.is_pod_sandbox {
            let (status, at_ns) = sb.wait_exit().await;
            ExitInfo { status, at_ns }
        } else {
            match sb.agent.wait(&c.id, &p.exec_id).await {
                Ok(e) => ExitInfo {
                    status: e.status,
                    at_ns: e.at_ns,
                },
                Err(e) => {
                    tracing::warn!(id = %c.id, exec = %p.exec_id, "wait: {e}; reporting 137");
                    ExitInfo {
                        status: 137,
                        at_ns: crate::clock::now_ns(),
                    }
                }
            }
        };
        if let Some(pty) = &p.pty {
            // containerd expects all output before the exit.
            let _ = tokio::time::timeout(Duration::from_secs(2), pty.wait_output()).await;
        }
        let e = p.exit().unwrap_or(exit);
        super::resources::drain_oom(&svc, &c).await;
        let _order = c.oom_order.lock().await;
        svc.events
            .exit(&c.id, &p.exec_id, p.pid(), e.status, e.at_ns)
            .await;
        // Only now may Wait return and Delete run: TaskDelete can never
        // precede TaskExit.
        p.set_exit(e);
        svc.persist().await;
    });
}

pub async fn kill(
    svc: &Arc<Service>,
    id: &str,
    exec_id: &str,
    signal: u32,
    all: bool,
) -> Result<()> {
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    if p.exit().is_some() {
        return Err(TaskError::ProcessFinished {
            id: id.into(),
            exec_id: exec_id.into(),
        }
        .into());
    }
    let sb = sandbox(svc)?;
    let unstarted = !p.started.load(Ordering::SeqCst);
    signal_process(&c, &sb, exec_id, signal, all).await?;
    if unstarted {
        // runc's rule: a created process that is killed exits, and its exit
        // is reported (a forced delete waits for it); if the signal did not
        // end it, Start finds this watch.
        spawn_exit_watch(svc.clone(), c, p, sb);
    }
    Ok(())
}

async fn signal_process(
    c: &Container,
    sb: &Arc<Sandbox>,
    exec_id: &str,
    signal: u32,
    all: bool,
) -> Result<()> {
    let id = c.id.as_str();
    if all && !c.is_pod_sandbox {
        // Every process, by cgroup: walking parent pids would miss daemons
        // reparented away and could hit reused pids.
        if let Some(cg) = &c.cgroup {
            cg.signal_all(signal as i32).await?;
        }
        // The kernel drops a signal a namespace PID 1 has no handler for:
        // the agent carries out its default action (unless it died already).
        return match sb
            .agent
            .signal(id, exec_id, signal)
            .await
            .map_err(ShimError::from)
        {
            Err(e) if e.code() == ttrpc::Code::NOT_FOUND => Ok(()),
            r => r,
        };
    }
    if c.is_pod_sandbox {
        // Killing the pod sandbox ends the pod: grace only for a catchable signal.
        let grace = if signal == libc::SIGKILL as u32 {
            Duration::ZERO
        } else {
            sb.grace
        };
        let sb = sb.clone();
        tokio::spawn(async move { sb.teardown(grace).await });
        return Ok(());
    }
    sb.agent.signal(id, exec_id, signal).await?;
    Ok(())
}

pub async fn wait(svc: &Arc<Service>, id: &str, exec_id: &str) -> Result<WaitResponse> {
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    let e = p.wait_exit().await;
    Ok(WaitResponse {
        exit_status: e.status,
        exited_at: Some(timestamp_ns(e.at_ns)).into(),
        ..Default::default()
    })
}

pub async fn delete(svc: &Arc<Service>, id: &str, exec_id: &str) -> Result<DeleteResponse> {
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    let sb = sandbox(svc).ok();
    if p.exit().is_none() {
        if p.started.load(Ordering::SeqCst) {
            return Err(TaskError::StillRunning {
                id: id.into(),
                exec_id: exec_id.into(),
            }
            .into());
        }
        // Created but never started: it is blocked in the agent; end it.
        if let Some(sb) = &sb {
            if !c.is_pod_sandbox {
                let _ = sb.agent.signal(id, exec_id, libc::SIGKILL as u32).await;
                if let Ok(e) = sb.agent.wait(id, exec_id).await {
                    p.set_exit(ExitInfo {
                        status: e.status,
                        at_ns: e.at_ns,
                    });
                }
            }
        }
        p.set_exit(ExitInfo {
            status: 137,
            at_ns: crate::clock::now_ns(),
        });
    }
    let e = p.exit().expect("exit set above");
    if !exec_id.is_empty() {
        c.execs.lock().expect("execs").remove(exec_id);
        if let Some(sb) = &sb {
            let _ = sb.agent.delete_process(id, exec_id).await;
        }
        return Ok(DeleteResponse {
            pid: p.pid(),
            exit_status: e.status,
            exited_at: Some(timestamp_ns(e.at_ns)).into(),
            ..Default::default()
        });
    }
    if c.is_pod_sandbox && svc.containers.lock().await.len() > 1 {
        return Err(TaskError::PodHasContainers { id: id.into() }.into());
    }
    if c.rootfs_mounted {
        crate::rootfs::cleanup(&c.bundle)?;
    }
    // Before the cgroup goes back to the pool and a new tenant.
    c.stop_oom_watch();
    let last = {
        let mut all = svc.containers.lock().await;
        all.remove(id);
        all.is_empty()
    };
    if last {
        // DestroySandbox ends the agent and all it holds: no DeleteProcess.
        if let Some(sb) = svc.take_sandbox() {
            sb.teardown(sb.grace).await;
        }
    } else if let Some(sb) = &sb {
        if !c.is_pod_sandbox && sb.exited().is_none() {
            if let Err(err) = sb.agent.delete_process(id, "").await {
                tracing::warn!(id, "agent DeleteProcess: {err}");
            }
        }
    }
    if let Some(cg) = &c.cgroup {
        if let Err(err) = cg.remove().await {
            tracing::warn!(id, "cgroup: {err}");
        }
    }
    if !c.is_pod_sandbox {
        // A failed poststop hook is logged, as runc does, not returned.
        let state = crate::hooks::state_json(&c.spec, id, "stopped", p.pid() as i32, &c.bundle);
        if let Err(e) = crate::hooks::run(&c.spec, "poststop", &state).await {
            tracing::warn!(id, "{e}");
        }
    }
    svc.events.delete(id, p.pid(), e.status, e.at_ns).await;
    Ok(DeleteResponse {
        pid: p.pid(),
        exit_status: e.status,
        exited_at: Some(timestamp_ns(e.at_ns)).into(),
        ..Default::default()
    })
}

pub async fn state(svc: &Arc<Service>, id: &str, exec_id: &str) -> Result<StateResponse> {
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    let status = match p.status(c.is_paused()) {
        Status::Created => ApiStatus::CREATED,
        Status::Running => ApiStatus::RUNNING,
        Status::Paused => ApiStatus::PAUSED,
        Status::Stopped => ApiStatus::STOPPED,
    };
    let exit = p.exit();
    Ok(StateResponse {
        id: if exec_id.is_empty() {
            id.to_string()
        } else {
            exec_id.to_string()
        },
        bundle: c.bundle.display().to_string(),
        pid: p.pid(),
        status: status.into(),
        stdin: p.stdio.stdin.clone(),
        stdout: p.stdio.stdout.clone(),
        stderr: p.stdio.stderr.clone(),
        terminal: p.stdio.terminal,
        exit_status: exit.map(|e| e.status).unwrap_or(0),
        exited_at: exit.map(|e| timestamp_ns(e.at_ns)).into(),
        exec_id: exec_id.to_string(),
        ..Default::default()
    })
}

pub async fn pids(svc: &Arc<Service>, id: &str) -> Result<PidsResponse> {
    let c = svc.container(id).await?;
    if c.is_pod_sandbox {
        let p = c.init.pid();
        return Ok(PidsResponse {
            processes: vec![ProcessInfo {
                pid: p,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    // The cgroup holds exactly the container's processes, whatever pid
    // namespace they share; exec ids come from the shim's own table.
    if let Some(cg) = &c.cgroup {
        let execs: std::collections::HashMap<u32, String> = c
            .execs
            .lock()
            .expect("execs")
            .iter()
            .filter_map(|(id, p)| p.as_ref().map(|p| (p.pid(), id.clone())))
            .collect();
        let processes = cg
            .pids()
            .await?
            .into_iter()
            .map(|pid| ProcessInfo {
                pid: pid as u32,
                info: execs.get(&(pid as u32)).map(|e| process_details(e)).into(),
                ..Default::default()
            })
            .collect();
        return Ok(PidsResponse {
            processes,
            ..Default::default()
        });
    }
    let sb = sandbox(svc)?;
    let listed = sb.agent.list_pids(id).await?;
    let inner: Vec<u32> = listed.iter().map(|(p, _)| *p).collect();
    let agent_pid = sb.pid();
    let map = tokio::task::spawn_blocking(move || {
        pidmap::host_pids_of(Path::new("/proc"), agent_pid, &inner)
    })
    .await
    .map_err(TaskError::blocking("process list"))?;
    let processes = listed
        .into_iter()
        .filter_map(|(inner, exec_id)| {
            map.get(&inner).map(|host| ProcessInfo {
                pid: *host as u32,
                info: (!exec_id.is_empty())
                    .then(|| process_details(&exec_id))
                    .into(),
                ..Default::default()
            })
        })
        .collect();
    Ok(PidsResponse {
        processes,
        ..Default::default()
    })
}

pub async fn resize_pty(
    svc: &Arc<Service>,
    id: &str,
    exec_id: &str,
    width: u32,
    height: u32,
) -> Result<()> {
    let c = svc.container(id).await?;
    let p = process(&c, exec_id)?;
    match &p.pty {
        Some(pty) => Ok(pty.resize(width, height)?),
        None => Err(TaskError::NoTerminal {
            id: id.into(),
            exec_id: exec_id.into(),
        }
        .into()),
    }
}

/// containerd's `containerd.runc.v1.ProcessDetails{exec_id}`, which `ctr task
/// ps` decodes to show an exec's id.
fn process_details(exec_id: &str) -> containerd_shim_protos::protobuf::well_known_types::any::Any {
    let mut value = Vec::with_capacity(exec_id.len() + 2);
    {
        let mut out = containerd_shim_protos::protobuf::CodedOutputStream::vec(&mut value);
        let _ = out.write_string(1, exec_id);
        let _ = out.flush();
    }
    containerd_shim_protos::protobuf::well_known_types::any::Any {
        type_url: "containerd.runc.v1.ProcessDetails".into(),
        value,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn process_details_encode_the_exec_id() {
        let a = super::process_details("e1");
        assert_eq!(a.type_url, "containerd.runc.v1.ProcessDetails");
        assert_eq!(a.value, b"\x0a\x02e1");
    }
}
