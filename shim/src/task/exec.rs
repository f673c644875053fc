//! Exec: a new process in a running container, through the steps it
//! shares with Create (stdio, the agent's process, placement).

use std::sync::Arc;

use containerd_shim_protos::api::ExecProcessRequest;
use oci_spec::runtime::Process as OciProcess;

use super::spawn::{self, Spawn};
use super::state::Process;
use super::undo::Undo;
use super::Service;
use super::TaskError;
use crate::error::Result;
use crate::io;
use crate::rlimit::memlock::OnFailure;

pub async fn exec(svc: &Arc<Service>, req: ExecProcessRequest) -> Result<()> {
    let c = svc.container(&req.id).await?;
    if req.exec_id.is_empty() {
        return Err(TaskError::EmptyId { what: "exec" }.into());
    }
    if c.is_pod_sandbox {
        return Err(TaskError::ExecIntoPodSandbox { id: req.id }.into());
    }
    // As runc: a process born in a frozen cgroup could not set itself up.
    if c.paused.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(TaskError::ExecIntoPaused { id: req.id }.into());
    }
    if c.init.exit().is_some() || !c.init.started.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(TaskError::ExecIntoStopped {
            id: req.id,
            exec_id: req.exec_id,
        }
        .into());
    }
    let spec_any = req.spec.as_ref().ok_or(TaskError::NoProcessSpec)?;
    let process: OciProcess =
        serde_json::from_slice(&spec_any.value).map_err(TaskError::MalformedProcess)?;
    let rlimits = process.rlimits().clone().unwrap_or_default();
    crate::rlimit::validate(&rlimits)?;
    let sandbox = svc.sandbox().ok_or(TaskError::SandboxGone)?;
    let reserved = c
        .reserve_exec(&req.exec_id)
        .ok_or_else(|| TaskError::ExecExists {
            id: req.id.clone(),
            exec_id: req.exec_id.clone(),
        })?;
    let stdio = io::Stdio::of(&req.stdin, &req.stdout, &req.stderr, req.terminal);
    let mut undo = Undo::new(format!("exec {} in {}", req.exec_id, req.id));
    let s = Spawn {
        sandbox: &sandbox,
        id: &req.id,
        exec_id: &req.exec_id,
        stdio: &stdio,
        owned: c
            .cgroup
            .as_ref()
            .map(|cg| spawn::birthplace(cg, sandbox.userns))
            .unwrap_or_default(),
        keep_io: svc.keep_io(&req.id, &req.exec_id),
    };
    let on_failure = OnFailure::parse(&svc.config().memlock.on_failure)?;
    let res = match spawn::exec(s, &process, &mut undo).await {
        Ok(p) => spawn::place(&p, c.cgroup.as_ref(), &rlimits, on_failure)
            .await
            .map(|()| p),
        Err(e) => Err(e),
    };
    let spawned = match res {
        Ok(p) => p,
        Err(e) => {
            undo.rollback().await;
            return Err(e);
        }
    };
    undo.commit();
    let p = Arc::new(Process::new(
        &req.exec_id,
        spawned.host_pid,
        spawned.inner_pid,
        stdio,
        spawned.stdin,
        spawned.pty,
    ));
    reserved.fill(p);
    svc.events.exec_added(&req.id, &req.exec_id).await;
    Ok(())
}
