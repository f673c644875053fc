//! Exec: a new process in a running container.

use std::path::Path;
use std::sync::Arc;

use containerd_shim_protos::api::ExecProcessRequest;
use oci_spec::runtime::Process as OciProcess;
use rund_proto::fdpass::FdHeader;
use rund_proto::options::ContainerOptions;

use super::state::{Process, StdioInfo};
use super::Service;
use crate::error::{Result, ShimError};
use crate::io::{self, StdioPaths};
use crate::sandbox::pidmap;

pub async fn exec(svc: &Arc<Service>, req: ExecProcessRequest) -> Result<()> {
    let c = svc.container(&req.id).await?;
    if req.exec_id.is_empty() {
        return Err(ShimError::InvalidArgument("exec id is empty".into()));
    }
    if c.is_pod_sandbox {
        return Err(ShimError::FailedPrecondition(format!(
            "{} is a pod sandbox: rund runs no process there to exec into",
            req.id
        )));
    }
    if c.init.exit().is_some() || !c.init.started.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ShimError::FailedPrecondition(format!(
            "container {} is not running: cannot exec {}",
            req.id, req.exec_id
        )));
    }
    if c.execs.lock().expect("execs").contains_key(&req.exec_id) {
        return Err(ShimError::AlreadyExists(format!(
            "exec {} already exists in {}",
            req.exec_id, req.id
        )));
    }
    let spec_any = req
        .spec
        .as_ref()
        .ok_or_else(|| ShimError::InvalidArgument("exec has no process spec".into()))?;
    let process: OciProcess = serde_json::from_slice(&spec_any.value)
        .map_err(|e| ShimError::InvalidArgument(format!("exec process spec is malformed: {e}")))?;
    let rlimits = process.rlimits().clone().unwrap_or_default();
    crate::rlimit::validate(&rlimits)?;
    let sandbox = svc
        .sandbox
        .lock()
        .await
        .clone()
        .ok_or_else(|| ShimError::FailedPrecondition("the sandbox is gone".into()))?;

    let stdio_info = StdioInfo {
        stdin: req.stdin.clone(),
        stdout: req.stdout.clone(),
        stderr: req.stderr.clone(),
        terminal: req.terminal,
    };
    let stdio = io::open(&StdioPaths {
        stdin: req.stdin.clone(),
        stdout: req.stdout.clone(),
        stderr: req.stderr.clone(),
        terminal: req.terminal,
    })?;
    let (kinds, fds) = stdio.fds();
    let header = FdHeader {
        container_id: req.id.clone(),
        exec_id: req.exec_id.clone(),
        fds: kinds,
    };
    let options = ContainerOptions {
        userns: sandbox.userns,
        ..Default::default()
    };
    let json = serde_json::to_vec(&process).map_err(|e| ShimError::Internal(e.to_string()))?;
    let inner = sandbox
        .agent
        .create_process(header, &fds, json, &options, req.terminal)
        .await?;
    drop(fds);
    let io::Stdio { pass, stdin, pty } = stdio;
    drop(pass);

    let placed = async {
        let host = pidmap::host_pid(Path::new("/proc"), sandbox.pid(), inner)?;
        if let Some(cg) = &c.cgroup {
            cg.add_pid(host).await?;
        }
        crate::rlimit::apply(host, &rlimits)?;
        Ok::<i32, ShimError>(host)
    }
    .await;
    let host = match placed {
        Ok(h) => h,
        Err(e) => {
            let _ = sandbox
                .agent
                .signal(&req.id, &req.exec_id, libc::SIGKILL as u32, false)
                .await;
            let _ = sandbox.agent.wait(&req.id, &req.exec_id).await;
            let _ = sandbox.agent.delete_process(&req.id, &req.exec_id).await;
            return Err(e);
        }
    };
    let p = Arc::new(Process::new(
        &req.exec_id,
        host,
        inner,
        stdio_info,
        stdin,
        pty,
    ));
    c.execs
        .lock()
        .expect("execs")
        .insert(req.exec_id.clone(), p);
    svc.events.exec_added(&req.id, &req.exec_id).await;
    Ok(())
}
