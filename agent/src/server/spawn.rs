//! Forking a container init or an exec and waiting for its set-up report.
//! Every forked process is owned by a [`ChildGuard`] until it is committed
//! to the tables: a request that fails or is cancelled (a ttrpc deadline
//! drops the handler) kills what it forked.

use std::convert::Infallible;
use std::os::fd::OwnedFd;

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use oci_spec::runtime::{Process, Spec};
use rund_proto::{ContainerOptions, NsSource};
use tokio::io::unix::AsyncFd;

use super::birth::{self, Birthplace};
use super::channel::{await_settled, nonblocking, FdMsg, Reports, Settled};
use super::state::{Container, Proc};
use crate::container::child::{exec_main, init_main, ExecArgs, InitArgs};
use crate::container::fds::PassedFds;
use crate::reaper::{ExitRx, Reaper};

/// A failure, with the ttrpc code to answer.
#[derive(Debug)]
pub struct SpawnError {
    pub code: ttrpc::Code,
    pub message: String,
}

pub fn invalid(message: String) -> SpawnError {
    SpawnError {
        code: ttrpc::Code::INVALID_ARGUMENT,
        message,
    }
}

pub fn internal(message: String) -> SpawnError {
    SpawnError {
        code: ttrpc::Code::INTERNAL,
        message,
    }
}

/// A forked process not yet in the tables: killed if dropped armed.
pub struct ChildGuard {
    reaper: Reaper,
    pub pid: Pid,
    pub exit: ExitRx,
    armed: bool,
}

impl ChildGuard {
    fn new(reaper: &Reaper, pid: Pid) -> Self {
        ChildGuard {
            reaper: reaper.clone(),
            exit: reaper.watch(pid),
            pid,
            armed: true,
        }
    }

    /// The forked process was an intermediate: follow its child instead.
    async fn follow(&mut self, real: Pid) {
        let _ = self.exit.wait_for(|e| e.is_some()).await;
        self.reaper.forget(self.pid);
        self.pid = real;
        self.exit = self.reaper.watch(real);
    }

    /// Kills and reaps now (the error path), instead of on drop.
    async fn kill_and_wait(mut self) {
        if self.exit.borrow().is_none() {
            let _ = kill(self.pid, Signal::SIGKILL);
        }
        let _ = self.exit.wait_for(|e| e.is_some()).await;
        self.reaper.forget(self.pid);
        self.armed = false;
    }

    pub fn commit(mut self, sync: Option<OwnedFd>) -> Proc {
        self.armed = false;
        Proc::new(self.pid, self.exit.clone(), sync)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.armed {
            crate::debug!("killing set-up process {} (request dropped)", self.pid);
            let _ = kill(self.pid, Signal::SIGKILL);
            // The reaper records its exit as unclaimed.
            self.reaper.forget(self.pid);
        }
    }
}

fn sync_pair() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| internal(format!("socketpair: {e}")))
}

fn register(fd: OwnedFd) -> Result<AsyncFd<OwnedFd>, SpawnError> {
    nonblocking(&fd).map_err(|e| internal(format!("nonblocking: {e}")))?;
    super::channel::register(fd).map_err(|e| internal(format!("register set-up channel: {e}")))
}

/// Waits for the child's report. On failure the child is killed and reaped.
pub async fn settle(
    mut child: ChildGuard,
    sync: OwnedFd,
    expect_pid: bool,
) -> Result<(ChildGuard, Settled, Reports, OwnedFd), SpawnError> {
    let sync = register(sync)?;
    let res = await_settled(&sync, expect_pid).await;
    if let Ok((_, Reports { pid: Some(p), .. })) = &res {
        child.follow(Pid::from_raw(*p)).await;
    }
    match res {
        Ok((settled, reports)) => Ok((child, settled, reports, sync.into_inner())),
        Err(e) => {
            child.kill_and_wait().await;
            Err(SpawnError {
                code: ttrpc::Code::FAILED_PRECONDITION,
                message: e.to_string(),
            })
        }
    }
}

/// A container init forked and set up to its first stop (ready, or paused
/// before pivot_root).
pub struct Forked {
    pub child: ChildGuard,
    pub settled: Settled,
    pub reports: Reports,
    pub sync: OwnedFd,
    pub spec: Spec,
}

pub async fn fork_container(
    reaper: &Reaper,
    id: &str,
    spec_json: &[u8],
    opts: ContainerOptions,
    terminal: bool,
    fds: FdMsg,
    init_bin: Option<OwnedFd>,
) -> Result<Forked, SpawnError> {
    let spec: Spec = serde_json::from_slice(spec_json)
        .map_err(|e| invalid(format!("container {id}: bad OCI spec: {e}")))?;
    let plan = opts.namespaces.clone().unwrap_or_default();
    let mut flags = CloneFlags::CLONE_NEWNS;
    for (kind, f) in [
        ("pid", CloneFlags::CLONE_NEWPID),
        ("net", CloneFlags::CLONE_NEWNET),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("cgroup", CloneFlags::CLONE_NEWCGROUP),
    ] {
        if plan.source(kind) == NsSource::NS_NEW {
            flags |= f;
        }
    }
    let (sync, child_end) = sync_pair()?;
    let mut passed = PassedFds::new(fds.0, fds.1);
    let place = Birthplace::take(&mut passed);
    let args = InitArgs {
        id: id.to_string(),
        spec: spec.clone(),
        opts,
        fds: passed,
        sync: child_end,
        terminal,
        init_bin,
    };
    let pid = birth::fork_in(flags, place, move || -> Infallible { init_main(args) })
        .map_err(|e| internal(format!("container {id}: clone3: {e}")))?;
    crate::debug!("container {id}: init forked as pid {pid}");
    let child = ChildGuard::new(reaper, pid);
    let (child, settled, reports, sync) =
        settle(child, sync, plan.source("pid") == NsSource::NS_FD)
            .await
            .map_err(|mut e| {
                e.message = format!(
                    "container {id}: {}",
                    e.message.trim_start_matches(&format!("container {id}: "))
                );
                e
            })?;
    Ok(Forked {
        child,
        settled,
        reports,
        sync,
        spec,
    })
}

/// The table entry of a container whose init stopped (ready or paused).
pub fn container_entry(forked: Forked, opts: &ContainerOptions, paused: bool) -> Container {
    let plan = opts.namespaces.clone().unwrap_or_default();
    // From the fd the init sent: its own /proc files are closed to us while
    // it is not dumpable.
    let pidns = forked
        .reports
        .ns
        .iter()
        .find(|(name, _)| name == "pid")
        .and_then(|(_, fd)| nix::sys::stat::fstat(fd).ok())
        .map(|st| st.st_ino);
    let seccomp = forked
        .spec
        .linux()
        .as_ref()
        .and_then(|l| l.seccomp().clone());
    let mut init = forked.child.commit(Some(forked.sync));
    init.ns_init = plan.source("pid") == NsSource::NS_NEW && !opts.use_init;
    Container {
        init,
        execs: Default::default(),
        starting_execs: Default::default(),
        ns: forked.reports.ns,
        pidns,
        seccomp,
        paused,
    }
}

/// What an exec needs from its container, copied out of the tables.
pub struct ExecContext {
    pub ns: Vec<(String, OwnedFd)>,
    pub seccomp: Option<oci_spec::runtime::LinuxSeccomp>,
    pub own_pidns: bool,
}

pub async fn fork_exec(
    reaper: &Reaper,
    ctx: ExecContext,
    id: &str,
    exec_id: &str,
    process_json: &[u8],
    fds: FdMsg,
) -> Result<(ChildGuard, OwnedFd), SpawnError> {
    let process: Process = serde_json::from_slice(process_json)
        .map_err(|e| invalid(format!("exec {exec_id}: bad OCI process: {e}")))?;
    let (sync, child_end) = sync_pair()?;
    let mut passed = PassedFds::new(fds.0, fds.1);
    let place = Birthplace::take(&mut passed);
    let args = ExecArgs {
        id: id.to_string(),
        exec_id: exec_id.to_string(),
        process,
        seccomp: ctx.seccomp,
        fds: passed,
        ns: ctx.ns,
        sync: child_end,
    };
    let pid = birth::fork_in(CloneFlags::empty(), place, move || -> Infallible {
        exec_main(args)
    })
    .map_err(|e| internal(format!("exec {exec_id}: fork: {e}")))?;
    let child = ChildGuard::new(reaper, pid);
    let (child, _, _, sync) = settle(child, sync, ctx.own_pidns).await?;
    Ok((child, sync))
}
