//! The long-running shim server: ttrpc on the socket containerd gave us,
//! the Task service under both task v2 and v3 names.

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

use containerd_shim::publisher::RemotePublisher;
use containerd_shim::{ExitSignal, Flags};
use containerd_shim_protos::shim_async::create_task;
use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use containerd_shim_protos::ttrpc::r#async::Server;

use crate::config::RundConfig;
use crate::task::events::Events;
use crate::task::Service;

const TASK_V2: &str = "containerd.task.v2.Task";
const TASK_V3: &str = "containerd.task.v3.Task";

/// A pod's shim is idle nearly all its life: one thread serves it, and the
/// blocking pool (filesystem, cgroup and fork work) lets its threads go soon.
pub fn run(flags: Flags) -> Result<(), String> {
    lean_malloc();
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(16)
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    let r = rt.block_on(serve(flags));
    if let Err(e) = &r {
        // `start` reads our stdout until it closes: an error there is reported.
        print!("{e}");
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    r
}

async fn serve(flags: Flags) -> Result<(), String> {
    if flags.socket.is_empty() {
        return Err("-socket is required".into());
    }
    super::logging::init(flags.debug);
    // SAFETY: ignoring SIGPIPE only changes this process's disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let config = RundConfig::load(None).map_err(|e| e.to_string())?;
    let ttrpc_address = std::env::var("TTRPC_ADDRESS").unwrap_or_default();
    let publisher = if ttrpc_address.is_empty() {
        None
    } else {
        Some(
            RemotePublisher::new(&ttrpc_address)
                .await
                .map_err(|e| format!("publisher: {e}"))?,
        )
    };
    let exit = Arc::new(ExitSignal::default());
    let service = Arc::new(Service::new(
        config,
        Events::new(publisher, flags.namespace.clone()),
        exit.clone(),
        flags.debug,
    ));
    let path = flags.socket.trim_start_matches("unix://").to_string();
    if let Some(dir) = Path::new(&path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("bind {path}: {e}"))?;
    let listener = Listener::try_from(listener).map_err(|e| format!("listener: {e}"))?;

    let task: Arc<dyn containerd_shim_protos::shim_async::Task + Send + Sync> =
        Arc::new(crate::task::TaskHandler(service.clone()));
    let mut services = create_task(task.clone());
    if let Some(v3) = create_task(task).remove(TASK_V2) {
        services.insert(TASK_V3.to_string(), v3);
    }
    let mut server = Server::new()
        .add_listener(listener)
        .register_service(services)
        .register_service(crate::sandboxer::service(service.clone()));
    server
        .start()
        .await
        .map_err(|e| format!("ttrpc server: {e}"))?;
    signal_started();
    let started_as = std::env::var(super::start::STARTED_AS_ENV).unwrap_or_default();
    tracing::info!(socket = %path, bootstrap = %started_as, "rund shim serving");

    let sigterm_service = service.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        if term.recv().await.is_some() {
            tracing::info!("SIGTERM: tearing the sandbox down");
            crate::task::teardown_all(&sigterm_service).await;
            sigterm_service.exit.signal();
        }
    });
    exit.wait().await;
    // The request that asked us to exit (Shutdown, ShutdownSandbox) is still
    // being answered: ttrpc's shutdown drops unsent replies, and containerd
    // fails RemovePodSandbox on a lost ShutdownSandbox reply.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let _ = server.shutdown().await;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// One malloc arena: threads of the blocking pool would each get (and keep)
/// their own, which costs resident memory for no contention worth saving.
/// A fixed mmap threshold keeps large frees going back to the kernel.
fn lean_malloc() {
    // SAFETY: mallopt only sets allocator parameters; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

/// Closes our stdout (the pipe `start` waits on) by pointing it at stderr.
fn signal_started() {
    // SAFETY: dup2 onto fd 1; both fds are valid for the process lifetime.
    unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
}

/// The agent pid recorded in a bundle, with its start time against pid reuse.
pub fn record_agent(bundle: &Path, pid: i32) {
    if let Some(start) = start_time(pid) {
        let _ = std::fs::write(bundle.join("rund-agent.pid"), format!("{pid} {start}"));
    }
}

/// `delete` after a crash: kill the agent recorded in this bundle, if it is
/// still the same process.
pub fn kill_recorded_agent(bundle: &Path) {
    let file = bundle.join("rund-agent.pid");
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let mut it = text.split_whitespace();
    let (Some(pid), Some(start)) = (
        it.next().and_then(|p| p.parse::<i32>().ok()),
        it.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return;
    };
    if start_time(pid) == Some(start) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = std::fs::remove_file(file);
}

fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
