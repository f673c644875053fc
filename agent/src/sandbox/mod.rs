//! The agent's own start: a tiny tmpfs root (fresh /proc, a few device
//! binds, the dir container rootfs trees are attached to) where no host
//! mount is reachable, a copy of the node's template (`template`) or built
//! and pivoted into, then the single-threaded runtime serving ttrpc on the
//! one connection the shim handed over.

pub mod root;
pub mod template;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use rund_proto::launch::{self, LaunchConfig, SyncMsg};

use crate::reaper::Reaper;
use crate::server::channel::FdChannel;
use crate::server::initbin::InitBinary;
use crate::server::AgentService;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Root(#[from] root::RootError),
    #[error("agent runtime: {0}")]
    Runtime(String),
}

/// The agent's main, in the forked PID 1. Never returns. `templated`: the
/// launcher entered the node's template before its unshare.
pub fn main(cfg: LaunchConfig, init_bin: InitBinary, templated: bool) -> ! {
    crate::log::set_debug(cfg.debug);
    // Nothing in a container may ptrace the agent or open its /proc files
    // (containers never share its pid namespace, but a hostPID one could).
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: fd 5 is the launch handshake socket, inherited from the shim; nothing else owns it.
    let sync = unsafe { OwnedFd::from_raw_fd(launch::SYNC_FD) };
    let code = match run(&cfg, &sync, init_bin, templated) {
        Ok(()) => 0,
        Err(e) => {
            crate::warn!("{e}");
            let _ = launch::send_json(
                std::os::fd::AsFd::as_fd(&sync),
                &SyncMsg::Error {
                    message: format!("rund-agent: {e}"),
                },
            );
            1
        }
    };
    std::process::exit(code)
}

fn run(
    cfg: &LaunchConfig,
    sync: &OwnedFd,
    init_bin: InitBinary,
    templated: bool,
) -> Result<(), AgentError> {
    root::setup(templated)?;
    // One thread for the sandbox's whole life: one arena, large buffers
    // (specs, replies) back to the kernel when freed.
    rund_sys::trim::lean_malloc(64 << 10);
    // One connection, a handful of fds: a small event buffer is plenty.
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_io_events_per_tick(64)
        .on_thread_park(rund_sys::trim::stack::parking)
        .on_thread_unpark(rund_sys::trim::stack::unparked)
        .enable_all()
        .build()
        .map_err(|e| AgentError::Runtime(e.to_string()))?;
    let handle = rt.handle().clone();
    rund_sys::trim::stack::wake_with(move || drop(handle.spawn(async {})));
    rt.block_on(serve(cfg, sync, init_bin))
}

async fn serve(cfg: &LaunchConfig, sync: &OwnedFd, init_bin: InitBinary) -> Result<(), AgentError> {
    let rt = |e: &dyn std::fmt::Display| AgentError::Runtime(e.to_string());
    if cfg.host_pid {
        // Not an init: orphans of the containers must still come to us.
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only sets a flag on this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    }
    let reaper = Reaper::default();
    let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        .map_err(|e| rt(&e))?;
    tokio::spawn(reaper.clone().run(sigchld));
    let shim_gone = Arc::new(tokio::sync::Notify::new());
    let gone = shim_gone.clone();
    // SAFETY: fd 4 is the fd side channel, inherited from the shim; nothing else owns it.
    let fdpass = unsafe { OwnedFd::from_raw_fd(launch::FDPASS_FD) };
    let (conns, more_conns) = tokio::sync::mpsc::unbounded_channel();
    let fdpass = FdChannel::spawn(fdpass, conns, move || gone.notify_one()).map_err(|e| rt(&e))?;
    let destroyed = Arc::new(tokio::sync::Notify::new());
    let service = Arc::new(AgentService {
        reaper,
        fdpass,
        state: Default::default(),
        destroyed: destroyed.clone(),
        init_bin,
        pod_pid: Default::default(),
        host_pid: cfg.host_pid,
        idle: crate::server::idle::IdleTrim::new(cfg.trim_after_ms),
        sandbox_id: std::sync::Mutex::new(cfg.sandbox_id.clone()),
        warmth: std::sync::Mutex::new(if cfg.warm {
            crate::server::claim::Warmth::Waiting
        } else {
            crate::server::claim::Warmth::Cold
        }),
    });
    // SAFETY: fd 3 is our end of the shim's socketpair; nothing else owns it.
    let conn = unsafe { OwnedFd::from_raw_fd(launch::CONN_FD) };
    let listener = rund_proto::conn::listener_with_more(conn, more_conns).map_err(|e| rt(&e))?;
    let mut server = ttrpc::r#async::Server::new()
        .add_listener(listener)
        .register_service(rund_proto::create_agent(service.clone()));
    server.start().await.map_err(|e| rt(&e))?;
    crate::debug!(
        "sandbox {} serving (pid {})",
        cfg.sandbox_id,
        std::process::id()
    );
    launch::send_json(std::os::fd::AsFd::as_fd(sync), &SyncMsg::Ready).map_err(|e| rt(&e))?;
    if cfg.warm {
        service.idle.waiting();
    }
    // Closing fd 5 ends the handshake: /dev/null replaces it, so the number
    // stays taken and the OwnedFd held by main() stays valid.
    let null = std::fs::File::open("/dev/null").map_err(|e| rt(&e))?;
    // SAFETY: dup2 only swaps what fd 5 refers to.
    let r = unsafe { libc::dup2(null.as_raw_fd(), sync.as_raw_fd()) };
    nix::errno::Errno::result(r).map_err(|e| rt(&e))?;
    tokio::select! {
        _ = destroyed.notified() => {
            let _ = server.shutdown().await;
            crate::debug!("sandbox {} destroyed", service.sandbox_id());
        }
        _ = shim_gone.notified() => {
            // Nobody may drive this sandbox any more: end it.
            crate::warn!("sandbox {}: the shim is gone; killing every container", service.sandbox_id());
            crate::server::destroy_now(&service).await;
        }
    }
    Ok(())
}
