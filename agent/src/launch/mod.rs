//! `rund-agent launch`: the handshake of `rund_proto::launch`, run by the
//! process the shim starts. It joins namespaces (still in the initial user
//! namespace), optionally enters a new user namespace, unshares the sandbox
//! namespaces and forks the agent as their PID 1.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sched::{setns, unshare, CloneFlags};
use nix::unistd::{fork, setresgid, setresuid, ForkResult, Gid, Uid};
use rund_proto::fdpass::{self, FdKind};
use rund_proto::launch::{self, LaunchConfig, SyncMsg};

use crate::container::ns::flag;
use crate::server::initbin::InitBinary;

pub mod sysctl;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}")]
    Proto(String),
    #[error("{op}: {errno}")]
    Sys {
        op: String,
        errno: nix::errno::Errno,
    },
    #[error("launch: {0}")]
    Bad(String),
    #[error("launch: {0}")]
    Sysctl(#[from] crate::container::sysctl::SysctlWriteError),
    #[error("launch: {0}")]
    Template(#[from] crate::sandbox::root::RootError),
}

fn sys(op: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> LaunchError {
    let op = op.into();
    move |errno| LaunchError::Sys { op, errno }
}

/// Namespaces that may be joined at launch, in join order (user first: it
/// decides what the others may do).
const JOINABLE: [&str; 5] = ["user", "net", "ipc", "uts", "cgroup"];

pub fn run() -> ! {
    // SAFETY: fd 5 is the launch handshake socket the shim passed; borrowed only.
    let sync = unsafe { BorrowedFd::borrow_raw(launch::SYNC_FD) };
    match launch(sync) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let message = format!("rund-agent launch: {e}");
            crate::warn!("{message}");
            let _ = launch::send_json(sync, &SyncMsg::Error { message });
            std::process::exit(1)
        }
    }
}

/// What a warm agent is launched with: new pid, ipc and uts namespaces and
/// nothing of any pod, but perhaps a new network namespace (a per-pod shim's
/// head start for a pod that wants one, which the claim then keeps).
fn warm_template(cfg: &LaunchConfig) -> bool {
    !cfg.userns
        && !cfg.host_pid
        && cfg.new_ipc
        && cfg.new_uts
        && cfg.hostname.is_none()
        && cfg.sysctls.is_empty()
}

fn launch(sync: BorrowedFd<'_>) -> Result<(), LaunchError> {
    // Only fds 0-5 are ours: a stray inherited copy of a handshake socket
    // would keep the shim from seeing it closed.
    crate::container::sync::close_others(&[launch::CONN_FD, launch::FDPASS_FD, launch::SYNC_FD]);
    let (hdr, fds) = fdpass::recv(sync).map_err(|e| LaunchError::Proto(e.to_string()))?;
    if hdr.seq != 0 {
        return Err(LaunchError::Bad(format!(
            "expected the launch fd batch (seq 0), got batch {}",
            hdr.seq
        )));
    }
    let cfg: LaunchConfig =
        launch::recv_json(sync).map_err(|e| LaunchError::Proto(e.to_string()))?;
    crate::log::set_debug(cfg.debug);
    if cfg.warm && !warm_template(&cfg) {
        return Err(LaunchError::Bad(
            "a warm agent gets its pod's hostname, sysctls and joined namespaces at its claim, and no user namespace".into(),
        ));
    }
    let mut ns: HashMap<String, OwnedFd> = HashMap::new();
    for (k, fd) in hdr.fds.into_iter().zip(fds) {
        match k {
            FdKind::Namespace(n) if JOINABLE.contains(&n.as_str()) => {
                ns.insert(n, fd);
            }
            other => return Err(LaunchError::Bad(format!("unexpected fd {other:?} at launch (only user, net, ipc, uts and cgroup namespaces can be joined)"))),
        }
    }
    for n in JOINABLE {
        if let Some(fd) = ns.get(n) {
            let f = flag(n).unwrap_or(CloneFlags::empty());
            setns(fd.as_fd(), f).map_err(sys(format!("setns {n}")))?;
        }
    }
    if cfg.warm && !ns.is_empty() {
        return Err(LaunchError::Bad(
            "a warm agent joins no namespace at launch".into(),
        ));
    }
    let joined: Vec<String> = ns.keys().cloned().collect();
    drop(ns);
    if cfg.userns {
        // Joined namespaces belong to the host's user namespace: the
        // sandbox's root will not be allowed to write their sysctls.
        sysctl::write_where(&cfg.sysctls, false, |n| joined.iter().any(|j| j == n))?;
    }
    // In a user namespace rund-init's copy is made now, by host root: owned
    // by an id the pod does not map and unreadable to it, the kernel ties the
    // init's mm to the host's user namespace, so a workload with
    // CAP_SYS_PTRACE in the pod's cannot attach to it or open its memory.
    // It is filled on first use (most pods run no init).
    let init_bin = if cfg.userns {
        InitBinary::reserved().map_err(|e| LaunchError::Bad(e.to_string()))?
    } else {
        InitBinary::default()
    };
    if cfg.userns {
        // A joined user namespace already has its maps: the shim checks them.
        if !joined.iter().any(|j| j == "user") {
            unshare(CloneFlags::CLONE_NEWUSER).map_err(sys("unshare user namespace"))?;
        }
        launch::send_json(
            sync,
            &SyncMsg::UsernsReady {
                pid: std::process::id() as i32,
            },
        )
        .map_err(|e| LaunchError::Proto(e.to_string()))?;
        match launch::recv_json::<SyncMsg>(sync).map_err(|e| LaunchError::Proto(e.to_string()))? {
            SyncMsg::MapsWritten => {}
            other => {
                return Err(LaunchError::Bad(format!(
                    "expected maps_written, got {other:?}"
                )))
            }
        }
        let root_g = Gid::from_raw(0);
        setresgid(root_g, root_g, root_g)
            .map_err(sys("setresgid 0 in the user namespace (is gid 0 mapped?)"))?;
        let _ = nix::unistd::setgroups(&[]);
        let root_u = Uid::from_raw(0);
        setresuid(root_u, root_u, root_u)
            .map_err(sys("setresuid 0 in the user namespace (is uid 0 mapped?)"))?;
    }
    let mut flags = CloneFlags::CLONE_NEWNS;
    for (on, f) in [
        (!cfg.host_pid, CloneFlags::CLONE_NEWPID),
        (cfg.new_net, CloneFlags::CLONE_NEWNET),
        (cfg.new_ipc, CloneFlags::CLONE_NEWIPC),
        (cfg.new_uts, CloneFlags::CLONE_NEWUTS),
    ] {
        if on {
            flags |= f;
        }
    }
    // The node's template: sysctls are written through the host's /proc
    // below, which the template does not have.
    let templated = match cfg.root_template.as_deref() {
        Some(pin) if !cfg.userns && cfg.sysctls.is_empty() => {
            crate::sandbox::template::enter(std::path::Path::new(pin))?;
            true
        }
        _ => false,
    };
    unshare(flags).map_err(sys(format!("unshare {flags:?}")))?;
    // The rest: every key when there is no user namespace, else the keys of
    // the namespaces made here (owned by the sandbox's user namespace). A key
    // of a namespace the host owns is refused (runc's rule).
    sysctl::write_where(&cfg.sysctls, cfg.userns, |n| {
        !(cfg.userns && joined.iter().any(|j| j == n))
    })?;
    // SAFETY: the launcher is single-threaded and has started no runtime; the
    // child becomes the agent and builds its own runtime.
    match unsafe { fork() }.map_err(sys("fork the agent"))? {
        ForkResult::Child => {
            if let Some(h) = &cfg.hostname {
                if let Err(errno) = nix::unistd::sethostname(h) {
                    let message = format!("rund-agent: sethostname {h:?}: {errno}");
                    let _ = launch::send_json(sync, &SyncMsg::Error { message });
                    std::process::exit(1);
                }
            }
            crate::sandbox::main(cfg, init_bin, templated)
        }
        ForkResult::Parent { child } => {
            launch::send_json(
                sync,
                &SyncMsg::AgentPid {
                    pid: child.as_raw(),
                },
            )
            .map_err(|e| LaunchError::Proto(e.to_string()))?;
            Ok(())
        }
    }
}
