//! CreateContainer, ResumeContainer and ExecProcess. Ids are reserved at
//! entry and released by a guard, so a concurrent request for the same id
//! is refused at once and a cancelled one leaves no reservation behind;
//! the container stays visible to every other request meanwhile.

use std::os::fd::AsRawFd;

use rund_proto::fdpass::FdKind;
use rund_proto::*;

use super::channel::{await_settled, Settled};
use super::spawn::{self, ExecContext, SpawnError};
use super::{err, not_found, AgentService};

fn spawn_err(e: SpawnError) -> ttrpc::Error {
    err(e.code, e.message)
}

/// Removes a reservation when dropped.
struct Reserved<'a> {
    svc: &'a AgentService,
    id: String,
    exec_id: Option<String>,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let mut st = self.svc.state();
        match &self.exec_id {
            None => {
                st.starting.remove(&self.id);
            }
            Some(e) => {
                if let Some(c) = st.containers.get_mut(&self.id) {
                    c.starting_execs.remove(e);
                }
            }
        }
    }
}

fn reserve_container<'a>(svc: &'a AgentService, id: &str) -> ttrpc::Result<Reserved<'a>> {
    let mut st = svc.state();
    if st.containers.contains_key(id) || !st.starting.insert(id.to_string()) {
        return Err(err(
            ttrpc::Code::ALREADY_EXISTS,
            format!("container {id} already exists"),
        ));
    }
    Ok(Reserved {
        svc,
        id: id.to_string(),
        exec_id: None,
    })
}

pub async fn container(
    svc: &AgentService,
    req: CreateContainerRequest,
) -> ttrpc::Result<CreateContainerResponse> {
    let id = req.container_id.as_str();
    crate::debug!("CreateContainer {id} (fd batch {})", req.fd_seq);
    let reserved = reserve_container(svc, id)?;
    let (mut kinds, mut fds) = svc.fdpass.take(req.fd_seq).await.map_err(|e| {
        err(
            ttrpc::Code::INVALID_ARGUMENT,
            format!("container {id}: {e}"),
        )
    })?;
    let mut opts = req.options.clone().unwrap_or_default();
    let mut plan = opts.namespaces.clone().unwrap_or_default();
    if plan.source("pid") == NsSource::NS_POD {
        // Joined like any other pid namespace fd.
        let ns = super::podinit::ensure(svc).map_err(spawn_err)?;
        kinds.push(FdKind::Namespace("pid".into()));
        fds.push(ns);
        plan.set("pid", NsSource::NS_FD);
        opts.namespaces = Some(plan).into();
    }
    let init_bin = if opts.use_init {
        let fd = svc.init_bin.get().map_err(|e| {
            err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!("container {id}: {e}"),
            )
        })?;
        Some(fd)
    } else {
        None
    };
    let forked = spawn::fork_container(
        &svc.reaper,
        id,
        &req.oci_spec,
        opts.clone(),
        req.terminal,
        (kinds, fds),
        init_bin,
    )
    .await
    .map_err(spawn_err)?;
    let paused = forked.settled == Settled::Paused;
    let c = spawn::container_entry(forked, &opts, paused);
    let pid = c.init.pid.as_raw() as u32;
    svc.state().containers.insert(id.to_string(), c);
    drop(reserved);
    crate::debug!(
        "created {id}: pid {pid}{}",
        if paused {
            " (paused before pivot_root)"
        } else {
            ""
        }
    );
    Ok(CreateContainerResponse {
        pid,
        paused,
        ..Default::default()
    })
}

pub async fn resume(svc: &AgentService, id: &str) -> ttrpc::Result<()> {
    let (sync, pid) = {
        let mut st = svc.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id, ""))?;
        if !c.paused {
            return Err(err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!("container {id} is not paused in set-up"),
            ));
        }
        let sync = c.init.sync.take().ok_or_else(|| {
            err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!("container {id} is being resumed"),
            )
        })?;
        (sync, c.init.pid)
    };
    let fail = |message: String| {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        err(
            ttrpc::Code::FAILED_PRECONDITION,
            format!("container {id}: {message}"),
        )
    };
    let _ = nix::sys::socket::send(
        sync.as_raw_fd(),
        b"r",
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
    );
    let sync = super::channel::register(sync).map_err(|e| fail(e.to_string()))?;
    match await_settled(&sync, false).await {
        Ok((Settled::Ready, _)) => {}
        Ok((Settled::Paused, _)) => return Err(fail("paused twice".into())),
        Err(e) => return Err(fail(e.to_string())),
    }
    let mut st = svc.state();
    let c = st.containers.get_mut(id).ok_or_else(|| not_found(id, ""))?;
    c.paused = false;
    c.init.sync = Some(sync.into_inner());
    Ok(())
}

pub async fn exec(
    svc: &AgentService,
    req: ExecProcessRequest,
) -> ttrpc::Result<ExecProcessResponse> {
    let (id, exec_id) = (req.container_id.as_str(), req.exec_id.as_str());
    crate::debug!("ExecProcess {id}/{exec_id} (fd batch {})", req.fd_seq);
    let ctx = {
        let mut st = svc.state();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id, ""))?;
        if c.paused || c.init.exited() {
            return Err(err(
                ttrpc::Code::FAILED_PRECONDITION,
                format!("container {id} is not running: cannot exec {exec_id}"),
            ));
        }
        if c.execs.contains_key(exec_id) || c.starting_execs.contains(exec_id) {
            return Err(err(
                ttrpc::Code::ALREADY_EXISTS,
                format!("exec {exec_id} of container {id} already exists"),
            ));
        }
        let ns: Result<Vec<_>, _> =
            c.ns.iter()
                .map(|(name, fd)| fd.try_clone().map(|d| (name.clone(), d)))
                .collect();
        let ns = ns.map_err(|e| err(ttrpc::Code::INTERNAL, format!("dup ns fd: {e}")))?;
        c.starting_execs.insert(exec_id.to_string());
        ExecContext {
            ns,
            seccomp: c.seccomp.clone(),
            own_pidns: c.ns.iter().any(|(name, _)| name == "pid"),
        }
    };
    let reserved = Reserved {
        svc,
        id: id.to_string(),
        exec_id: Some(exec_id.to_string()),
    };
    let fds = svc.fdpass.take(req.fd_seq).await.map_err(|e| {
        err(
            ttrpc::Code::INVALID_ARGUMENT,
            format!("exec {exec_id}: {e}"),
        )
    })?;
    let (child, sync) = spawn::fork_exec(&svc.reaper, ctx, id, exec_id, &req.oci_process, fds)
        .await
        .map_err(spawn_err)?;
    let pid = child.pid.as_raw() as u32;
    {
        let mut st = svc.state();
        // The container may have been deleted meanwhile: the guard kills the child.
        let c = st.containers.get_mut(id).ok_or_else(|| not_found(id, ""))?;
        c.execs
            .insert(exec_id.to_string(), child.commit(Some(sync)));
    }
    drop(reserved);
    crate::debug!("created {id}/{exec_id}: pid {pid}");
    Ok(ExecProcessResponse {
        pid,
        ..Default::default()
    })
}
