//! What runs in a process the agent forks: a container init or an exec.
//! Set-up errors are reported on the sync channel, so they reach `ctr`.

use std::os::fd::{AsFd, OwnedFd};

use oci_spec::runtime::{LinuxSeccomp, Process, Spec};
use rund_proto::options::{ContainerOptions, NsSource};

use super::fds::PassedFds;
use super::sync::{close_others, raw, report, wait_start, ChildMsg};
use super::{ns, rootfs, stdio};
use crate::process::exec::{self, Prepared};
use crate::process::user;

pub struct InitArgs {
    pub id: String,
    pub spec: Spec,
    pub opts: ContainerOptions,
    pub fds: PassedFds,
    pub sync: OwnedFd,
    pub terminal: bool,
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

fn start_or_exit(sync: OwnedFd) {
    report(sync.as_fd(), &ChildMsg::Ready);
    if !wait_start(sync.as_fd()) {
        // The agent dropped the process before starting it.
        // SAFETY: as in fail().
        unsafe { libc::_exit(1) }
    }
}

fn state_json(id: &str, spec: Option<&Spec>, status: &str) -> String {
    serde_json::json!({
        "ociVersion": spec.map(|s| s.version().clone()).unwrap_or_else(|| "1.0.2".into()),
        "id": id,
        "status": status,
        "pid": std::process::id(),
        "bundle": "",
        "annotations": spec.and_then(|s| s.annotations().clone()).unwrap_or_default(),
    })
    .to_string()
}

/// The container init, right after clone3.
pub fn init_main(mut a: InitArgs) -> ! {
    crate::sys::raw::reset_signals();
    let mut keep = a.fds.raw();
    keep.push(raw(&a.sync));
    close_others(&keep);
    let prepared = match init_setup(&mut a) {
        Ok(p) => p,
        Err(e) => fail(&a.sync, format!("container {}: {e}", a.id)),
    };
    start_or_exit(a.sync);
    drop(a.fds);
    if a.opts.use_init {
        crate::init::run(a.terminal, move || exec::exec(prepared).to_string())
    }
    let e = exec::exec(prepared);
    die(&e.to_string())
}

fn init_setup(a: &mut InitArgs) -> Result<Prepared, String> {
    let plan = &a.opts.namespaces;
    if plan.pid == NsSource::Fd {
        let fd = a.fds.namespaces.get("pid").ok_or("the namespace plan joins a pid namespace but no FdKind::Namespace(\"pid\") fd was passed")?;
        ns::join("pid", fd)?;
        ns::fork_into_pid_ns(&a.sync)?;
    }
    for (name, src) in [
        ("net", plan.net),
        ("ipc", plan.ipc),
        ("uts", plan.uts),
        ("cgroup", plan.cgroup),
    ] {
        if src == NsSource::Fd {
            let fd = a.fds.namespaces.get(name).ok_or_else(|| format!("the namespace plan joins a {name} namespace but no FdKind::Namespace({name:?}) fd was passed"))?;
            ns::join(name, fd)?;
        }
    }
    if let Some(h) = a.spec.hostname() {
        if plan.uts == NsSource::New {
            nix::unistd::sethostname(h).map_err(|e| format!("sethostname {h:?}: {e}"))?;
        }
    }
    stdio::setup(&mut a.fds)?;
    let process = a.spec.process().clone().ok_or("the spec has no process")?;
    if let Some(v) = process.oom_score_adj() {
        user::oom_score_adj(v)?;
    }
    let state = state_json(&a.id, Some(&a.spec), "creating");
    rootfs::build(&a.spec, &a.opts, &a.fds, &state).map_err(|e| e.to_string())?;
    let start_hooks = a
        .spec
        .hooks()
        .as_ref()
        .and_then(|h| h.start_container().clone())
        .unwrap_or_default();
    let seccomp = a.spec.linux().as_ref().and_then(|l| l.seccomp().as_ref());
    exec::prepare(
        &process,
        seccomp,
        start_hooks,
        state_json(&a.id, Some(&a.spec), "created"),
    )
    .map_err(|e| e.to_string())
}

/// An exec process, right after fork.
pub fn exec_main(mut a: ExecArgs) -> ! {
    crate::sys::raw::reset_signals();
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
    start_or_exit(a.sync);
    drop(a.fds);
    let e = exec::exec(prepared);
    die(&e.to_string())
}

fn exec_setup(a: &mut ExecArgs) -> Result<Prepared, String> {
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
    let state = state_json(&a.id, None, "running");
    exec::prepare(&a.process, a.seccomp.as_ref(), Vec::new(), state).map_err(|e| e.to_string())
}

fn die(msg: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "rund-agent: {msg}");
    // SAFETY: leave the forked child without running destructors.
    unsafe { libc::_exit(127) }
}
