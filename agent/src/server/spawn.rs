//! CreateProcess: forking a container init or an exec and waiting for its
//! set-up report.

use std::os::fd::{AsFd, OwnedFd};

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use oci_spec::runtime::{Process, Spec};
use rund_proto::options::{ContainerOptions, NsSource};
use tokio::io::unix::AsyncFd;

use super::channel::{await_ready, nonblocking, FdMsg};
use super::state::{ns_inode, Container, Proc};
use crate::container::child::{exec_main, init_main, ExecArgs, InitArgs};
use crate::container::fds::PassedFds;
use crate::reaper::Reaper;
use crate::sys::raw::{clone3, clone3_into};

/// A failure, with the ttrpc code to answer.
pub struct SpawnError {
    pub code: ttrpc::Code,
    pub message: String,
}

fn invalid(message: String) -> SpawnError {
    SpawnError {
        code: ttrpc::Code::INVALID_ARGUMENT,
        message,
    }
}

fn internal(message: String) -> SpawnError {
    SpawnError {
        code: ttrpc::Code::INTERNAL,
        message,
    }
}

/// Namespaces kept for execs, in join order (pid before mnt: setns(mnt)
/// changes the root, and the pid ns is entered by the next fork anyway).
const EXEC_NS: [&str; 6] = ["net", "ipc", "uts", "cgroup", "pid", "mnt"];

fn sync_pair() -> Result<(AsyncFd<OwnedFd>, OwnedFd), SpawnError> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| internal(format!("socketpair: {e}")))?;
    nonblocking(&a).map_err(|e| internal(format!("nonblocking: {e}")))?;
    Ok((
        super::channel::register(a)
            .map_err(|e| internal(format!("register set-up channel: {e}")))?,
        b,
    ))
}

/// Waits for the child's report. On failure the child is killed and reaped.
async fn settle(
    reaper: &Reaper,
    pid: Pid,
    sync: AsyncFd<OwnedFd>,
    expect_pid: bool,
) -> Result<Proc, SpawnError> {
    let mut exit = reaper.watch(pid);
    let res = await_ready(&sync, expect_pid).await;
    let mut real = pid;
    if let Ok(Some(p)) = res {
        // The forked process was an intermediate: watch the grandchild instead.
        real = Pid::from_raw(p);
        let _ = exit.wait_for(|e| e.is_some()).await;
        reaper.forget(pid);
        exit = reaper.watch(real);
    }
    match res {
        Ok(_) => Ok(Proc {
            pid: real,
            exit,
            sync: Some(sync.into_inner()),
        }),
        Err(message) => {
            if exit.borrow().is_none() {
                let _ = kill(real, Signal::SIGKILL);
            }
            let _ = exit.wait_for(|e| e.is_some()).await;
            reaper.forget(real);
            if real != pid {
                reaper.forget(pid);
            }
            Err(SpawnError {
                code: ttrpc::Code::FAILED_PRECONDITION,
                message,
            })
        }
    }
}

/// clone3 of a container init, into its cgroup from birth when the shim
/// passed one (v2), so nothing it does is charged elsewhere. Without the
/// permission (or kernel support) it falls back to a plain clone3; the shim
/// then places the init through cgroup.procs as it always does.
fn fork_init(
    flags: CloneFlags,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
) -> Result<Option<Pid>, nix::errno::Errno> {
    let Some(cg) = cgroup else {
        return clone3(flags);
    };
    match clone3_into(flags, Some(cg)) {
        Err(e) => {
            crate::debug!("CLONE_INTO_CGROUP refused ({e}); plain clone3");
            clone3(flags)
        }
        ok => ok,
    }
}

pub async fn create_init(
    reaper: &Reaper,
    id: &str,
    spec_json: &[u8],
    options_json: &[u8],
    terminal: bool,
    fds: FdMsg,
) -> Result<Container, SpawnError> {
    let spec: Spec = serde_json::from_slice(spec_json)
        .map_err(|e| invalid(format!("container {id}: bad OCI spec: {e}")))?;
    let opts: ContainerOptions = if options_json.is_empty() {
        ContainerOptions::default()
    } else {
        serde_json::from_slice(options_json)
            .map_err(|e| invalid(format!("container {id}: bad options: {e}")))?
    };
    let plan = opts.namespaces.clone();
    let mut flags = CloneFlags::CLONE_NEWNS;
    for (src, f) in [
        (plan.pid, CloneFlags::CLONE_NEWPID),
        (plan.net, CloneFlags::CLONE_NEWNET),
        (plan.ipc, CloneFlags::CLONE_NEWIPC),
        (plan.uts, CloneFlags::CLONE_NEWUTS),
        (plan.cgroup, CloneFlags::CLONE_NEWCGROUP),
    ] {
        if src == NsSource::New {
            flags |= f;
        }
    }
    let seccomp = spec.linux().as_ref().and_then(|l| l.seccomp().clone());
    let (sync, child_end) = sync_pair()?;
    let mut passed = PassedFds::new(fds.0, fds.1);
    let cgroup = passed.cgroup.take();
    let args = InitArgs {
        id: id.to_string(),
        spec,
        opts,
        fds: passed,
        sync: child_end,
        terminal,
    };
    let pid = match fork_init(flags, cgroup.as_ref().map(|f| f.as_fd())) {
        Err(e) => return Err(internal(format!("container {id}: clone3: {e}"))),
        Ok(None) => init_main(args),
        Ok(Some(pid)) => pid,
    };
    drop(cgroup);
    drop(args);
    crate::debug!("container {id}: init forked as pid {pid}");
    let init = settle(reaper, pid, sync, plan.pid == NsSource::Fd)
        .await
        .map_err(|mut e| {
            e.message = format!(
                "container {id}: {}",
                e.message.trim_start_matches(&format!("container {id}: "))
            );
            e
        })?;
    let raw = init.pid.as_raw();
    let mut ns = Vec::new();
    for name in EXEC_NS {
        if name == "pid" && plan.pid == NsSource::Sandbox {
            continue;
        }
        let path = format!("/proc/{raw}/ns/{name}");
        // Joining a namespace we are already in is a no-op, and setns of
        // one's own cgroup namespace can even be refused: skip those.
        if same_file(&path, &format!("/proc/self/ns/{name}")) {
            continue;
        }
        match std::fs::File::open(&path) {
            Ok(f) => ns.push((name.to_string(), OwnedFd::from(f))),
            Err(e) => {
                // An exec that cannot join the container must not run
                // elsewhere: refuse the container now.
                let _ = nix::sys::signal::kill(init.pid, nix::sys::signal::Signal::SIGKILL);
                return Err(internal(format!(
                    "container {id}: open {path}: {e} (execs could not join the container)"
                )));
            }
        }
    }
    let pidns = (plan.pid != NsSource::Sandbox)
        .then(|| ns_inode(raw, "pid"))
        .flatten();
    Ok(Container {
        init,
        execs: Default::default(),
        ns,
        pidns,
        seccomp,
    })
}

pub async fn create_exec(
    reaper: &Reaper,
    c: &Container,
    id: &str,
    exec_id: &str,
    spec_json: &[u8],
    fds: FdMsg,
) -> Result<Proc, SpawnError> {
    let process: Process = serde_json::from_slice(spec_json)
        .map_err(|e| invalid(format!("exec {exec_id}: bad OCI process: {e}")))?;
    let mut ns = Vec::new();
    for (name, fd) in &c.ns {
        ns.push((
            name.clone(),
            fd.try_clone()
                .map_err(|e| internal(format!("dup ns fd: {e}")))?,
        ));
    }
    let (sync, child_end) = sync_pair()?;
    let args = ExecArgs {
        id: id.to_string(),
        exec_id: exec_id.to_string(),
        process,
        seccomp: c.seccomp.clone(),
        fds: PassedFds::new(fds.0, fds.1),
        ns,
        sync: child_end,
    };
    let pid = match clone3(CloneFlags::empty()) {
        Err(e) => return Err(internal(format!("exec {exec_id}: fork: {e}"))),
        Ok(None) => exec_main(args),
        Ok(Some(pid)) => pid,
    };
    drop(args);
    settle(reaper, pid, sync, c.pidns.is_some()).await
}

fn same_file(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod fork_tests {
    use super::*;

    #[test]
    fn a_refused_cgroup_falls_back_to_a_plain_clone() {
        // Not a cgroup2 directory: the kernel refuses CLONE_INTO_CGROUP.
        let not_cgroup = std::fs::File::open("/").unwrap();
        match fork_init(CloneFlags::empty(), Some(not_cgroup.as_fd())) {
            // SAFETY: leave the forked test child at once.
            Ok(None) => unsafe { libc::_exit(0) },
            Ok(Some(pid)) => {
                let st = nix::sys::wait::waitpid(pid, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(pid, 0));
            }
            Err(e) => panic!("no fallback: {e}"),
        }
    }
}
