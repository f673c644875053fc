//! What runs in a process the agent forks: a container init or an exec.
//! Set-up errors are reported on the sync channel, so they reach `ctr`.
//!
//! The child is a copy of the agent until it execs, so it is made
//! non-dumpable first: nothing in the container may ptrace it or open its
//! /proc files while it still holds the agent's privileges.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;

use oci_spec::runtime::{LinuxSeccomp, Process, Spec};
use rund_proto::{ContainerOptions, NsSource};

use super::fds::PassedFds;
use super::sync::{close_others, raw, report, wait_go, ChildMsg, SyncError};
use super::{ns, rootfs, stdio};
use crate::process::exec::{self, ExecError, Prepared};
use crate::process::user::{self, OomScoreAdjError};

/// Why a forked child could not get to its exec; reported on the sync channel.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "the namespace plan joins a {0} namespace but no FdKind::Namespace({0:?}) fd was passed"
    )]
    NoNamespaceFd(String),
    #[error(transparent)]
    Namespace(#[from] ns::NsError),
    #[error("sethostname {name:?}: {errno}")]
    Hostname {
        name: String,
        errno: nix::errno::Errno,
    },
    #[error(transparent)]
    Report(#[from] SyncError),
    #[error(transparent)]
    Stdio(#[from] stdio::StdioError),
    #[error("the spec has no process")]
    NoProcess,
    #[error("create cwd {path}: {source}", path = .0.display(), source = .1)]
    Cwd(std::path::PathBuf, std::io::Error),
    #[error(transparent)]
    OomScoreAdj(#[from] OomScoreAdjError),
    #[error(transparent)]
    Rootfs(#[from] rootfs::RootfsError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

pub struct InitArgs {
    pub id: String,
    pub spec: Spec,
    pub opts: ContainerOptions,
    pub fds: PassedFds,
    pub sync: OwnedFd,
    pub terminal: bool,
    /// rund-init as a sealed memfd, when the container runs it as PID 1.
    pub init_bin: Option<OwnedFd>,
}

pub struct ExecArgs {
    pub id: String,
    pub exec_id: String,
    pub process: Process,
    pub seccomp: Option<LinuxSeccomp>,
    pub fds: PassedFds,
    /// The container's namespaces, in join order (pid before mnt).
    pub ns: Vec<(String, OwnedFd)>,
    pub sync: OwnedFd,
}

fn fail(sync: &OwnedFd, message: String) -> ! {
    report(sync.as_fd(), &ChildMsg::Error { message });
    // SAFETY: leave the forked child without running the agent's destructors.
    unsafe { libc::_exit(1) }
}

/// Reports `msg` and blocks until the agent says go; exits if it went away.
fn report_and_wait(sync: &OwnedFd, msg: ChildMsg) {
    report(sync.as_fd(), &msg);
    if !wait_go(sync.as_fd()) {
        // The agent dropped the process before starting it.
        // SAFETY: as in fail().
        unsafe { libc::_exit(1) }
    }
}

/// The OCI state a startContainer hook reads: the pid as the container sees
/// it and the bundle's host path (as runc gives them), status "created".
fn start_state(id: &str, spec: Option<&Spec>, bundle: &str) -> String {
    serde_json::json!({
        "ociVersion": spec.map(|s| s.version().clone()).unwrap_or_else(|| "1.0.2".into()),
        "id": id,
        "status": "created",
        "pid": std::process::id(),
        "bundle": bundle,
        "annotations": spec.and_then(|s| s.annotations().clone()).unwrap_or_default(),
    })
    .to_string()
}

fn nondumpable() {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// The container init, right after clone3.
pub fn init_main(mut a: InitArgs) -> ! {
    nondumpable();
    rund_sys::process::reset_signals();
    let mut keep = a.fds.raw();
    keep.push(raw(&a.sync));
    keep.extend(a.init_bin.as_ref().map(raw));
    close_others(&keep);
    let prepared = match init_setup(&mut a) {
        Ok(p) => p,
        Err(e) => fail(&a.sync, format!("container {}: {e}", a.id)),
    };
    report_and_wait(&a.sync, ChildMsg::Ready);
    drop(a.fds);
    let state = start_state(&a.id, Some(&a.spec), &a.opts.bundle);
    let e = exec::launch(prepared, &state);
    die(&format!("container {}: {e}", a.id))
}

fn init_setup(a: &mut InitArgs) -> Result<Prepared, SetupError> {
    let plan = a.opts.namespaces.clone().unwrap_or_default();
    if plan.source("pid") == NsSource::NS_FD {
        let fd = a
            .fds
            .namespaces
            .get("pid")
            .ok_or_else(|| SetupError::NoNamespaceFd("pid".into()))?;
        ns::join("pid", fd)?;
        ns::fork_into_pid_ns(&a.sync)?;
    }
    for name in ["net", "ipc", "uts", "cgroup"] {
        if plan.source(name) == NsSource::NS_FD {
            let fd = a
                .fds
                .namespaces
                .get(name)
                .ok_or_else(|| SetupError::NoNamespaceFd(name.into()))?;
            ns::join(name, fd)?;
        }
    }
    if let Some(h) = a.spec.hostname() {
        if plan.source("uts") == NsSource::NS_NEW {
            nix::unistd::sethostname(h).map_err(|errno| SetupError::Hostname {
                name: h.clone(),
                errno,
            })?;
        }
    }
    let shared: Vec<&str> = rund_proto::PLANNED_NAMESPACES
        .into_iter()
        .filter(|k| plan.source(k) == NsSource::NS_SANDBOX)
        .collect();
    super::sync::report_namespaces(a.sync.as_fd(), &shared)?;
    stdio::setup(&mut a.fds)?;
    let process = a.spec.process().clone().ok_or(SetupError::NoProcess)?;
    if let Some(v) = process.oom_score_adj() {
        user::oom_score_adj(v)?;
    }
    let sync = &a.sync;
    let pause = a.opts.pause_before_pivot;
    let mut before_pivot = || {
        if pause {
            report_and_wait(sync, ChildMsg::Paused);
        }
    };
    rootfs::build(&a.spec, &a.opts, &a.fds, &mut before_pivot)?;
    let start_hooks = a
        .spec
        .hooks()
        .as_ref()
        .and_then(|h| h.start_container().clone())
        .unwrap_or_default();
    let seccomp = a.spec.linux().as_ref().and_then(|l| l.seccomp().as_ref());
    // As runc: a missing cwd of the container's process is made (0755, as
    // root). After pivot_root, so it resolves inside the container's root.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(process.cwd())
        .map_err(|e| SetupError::Cwd(process.cwd().to_path_buf(), e))?;
    let mut p = exec::prepare(&process, seccomp, start_hooks)?;
    p.init = a.init_bin.take().map(|fd| (fd, a.terminal));
    exec::finalize(&mut p)?;
    Ok(p)
}

/// An exec process, right after fork.
pub fn exec_main(mut a: ExecArgs) -> ! {
    nondumpable();
    rund_sys::process::reset_signals();
    let mut keep = a.fds.raw();
    keep.push(raw(&a.sync));
    keep.extend(a.ns.iter().map(|(_, f)| raw(f)));
    close_others(&keep);
    let prepared = match exec_setup(&mut a) {
        Ok(p) => p,
        Err(e) => fail(
            &a.sync,
            format!("exec {} in container {}: {e}", a.exec_id, a.id),
        ),
    };
    report_and_wait(&a.sync, ChildMsg::Ready);
    drop(a.fds);
    let state = start_state(&a.id, None, "");
    let e = exec::launch(prepared, &state);
    die(&format!("exec {} in container {}: {e}", a.exec_id, a.id))
}

fn exec_setup(a: &mut ExecArgs) -> Result<Prepared, SetupError> {
    // Stdio first: /dev/null is the agent's, gone once the mnt ns is joined.
    let console = a.fds.console.is_some();
    stdio::setup_console_fds(&mut a.fds)?;
    let mut pid_joined = false;
    for (name, fd) in &a.ns {
        ns::join(name, fd)?;
        pid_joined |= name == "pid";
    }
    for (_, fd) in a.ns.drain(..) {
        drop(fd);
    }
    if pid_joined {
        ns::fork_into_pid_ns(&a.sync)?;
    }
    if console {
        stdio::take_ctty()?;
    }
    if let Some(v) = a.process.oom_score_adj() {
        user::oom_score_adj(v)?;
    }
    // startContainer hooks are a container-level step: execs run none.
    let mut p = exec::prepare(&a.process, a.seccomp.as_ref(), Vec::new())?;
    exec::finalize(&mut p)?;
    Ok(p)
}

fn die(msg: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "rund-agent: {msg}");
    // SAFETY: leave the forked child without running destructors.
    unsafe { libc::_exit(127) }
}
