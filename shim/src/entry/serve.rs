//! The long-running shim server: ttrpc on the socket containerd gave us,
//! the Task service under both task v2 and v3 names.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

use containerd_shim_protos::shim_async::create_task;
use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use containerd_shim_protos::ttrpc::r#async::Server;

use super::error::EntryError;
use super::flags::Flags;
use crate::config::RundConfig;
use crate::task::events::Events;
use crate::task::exit_signal::ExitSignal;
use crate::task::publish::Publisher;
use crate::task::Service;

const TASK_V2: &str = "containerd.task.v2.Task";
const TASK_V3: &str = "containerd.task.v3.Task";
/// Set by `start` in the server it forks for a pod's first container: the
/// server launches the pod's agent as it starts (`sandbox::head_start`).
pub static HEAD_START: std::sync::Mutex<Option<crate::task::HeadPlan>> =
    std::sync::Mutex::new(None);
/// Set by `start` in the server it forks for a pod's first container: the
/// server begins that container's cgroup as it starts (`task::early_cgroup::head`).
pub static CGROUP_HEAD_START: std::sync::Mutex<Option<crate::task::CgroupHeadPlan>> =
    std::sync::Mutex::new(None);
/// The config `start` read before it forked this server, from the same file
/// the server would read (`config::ENV_PATH`, else the default path).
static FORKED_CONFIG: std::sync::Mutex<Option<RundConfig>> = std::sync::Mutex::new(None);

/// Called in the forked server, before [`run`]: `start`'s parsed config.
pub fn hand_config(config: Option<RundConfig>) {
    *FORKED_CONFIG.lock().unwrap_or_else(|e| e.into_inner()) = config;
}

/// How long an exiting shim waits for containerd to take its last events.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long an idle thread of the blocking pool waits for more work. Well
/// under the idle trim's delay (`[idle] trim_after_ms`), so the threads a
/// request used have exited, running their exit code, before the trim
/// unmaps what ran (`trim::thread_exit`: an exit right before a trim pushes
/// it back, and one after a trim brings another).
pub const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_millis(100);

/// A pod's shim is idle nearly all its life: one thread serves it, and the
/// blocking pool (filesystem, cgroup and fork work) lets its threads go soon.
pub fn run(flags: Flags) -> Result<(), EntryError> {
    rund_sys::trim::lean_malloc(128 << 10);
    let config = FORKED_CONFIG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    // The head start's fork, exec and handshake run on a thread of their own
    // from here on, while this one builds the runtime and binds the socket.
    let head_start = HEAD_START.lock().unwrap_or_else(|e| e.into_inner()).take();
    let early = match (head_start, &config) {
        (Some(plan), Some(config)) if !flags.socket.is_empty() => {
            crate::logging::open(Path::new("log"));
            Some(crate::task::early_head_start(config, flags.debug, plan))
        }
        _ => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(16)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .on_thread_stop(rund_sys::trim::thread_exit)
        .on_thread_park(rund_sys::trim::stack::parking)
        .on_thread_unpark(rund_sys::trim::stack::unparked)
        .enable_all()
        .build()
        .map_err(EntryError::Runtime)?;
    let handle = rt.handle().clone();
    rund_sys::trim::stack::wake_with(move || drop(handle.spawn(async {})));
    let r = rt.block_on(serve(flags, config, early));
    if let Err(e) = &r {
        // `start` reads our stdout until it closes: an error there is reported.
        print!("{e}");
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    r
}

async fn serve(
    flags: Flags,
    config: Option<RundConfig>,
    early: Option<crate::task::EarlyHead>,
) -> Result<(), EntryError> {
    if flags.socket.is_empty() {
        return Err(EntryError::NoSocket);
    }
    crate::logging::init(Path::new("log"), flags.debug);
    ignore_sigpipe();
    let config = match config {
        Some(config) => config,
        None => RundConfig::load(None)?,
    };
    let publisher = match connect_publisher().await {
        Ok(p) => p,
        Err(e) => {
            if let Some(early) = early {
                crate::task::abandon_early_head(early).await;
            }
            return Err(e);
        }
    };
    let exit = Arc::new(ExitSignal::default());
    let service = Arc::new(Service::new(
        config,
        Events::new(publisher, flags.namespace.clone()),
        exit.clone(),
        flags.debug,
    ));
    if let Some(path) = std::env::var_os(crate::config::ENV_PATH) {
        // Create's runtime options name the same file: not read a third time.
        service.set_config_in_force(path.into());
    }
    if let Some(early) = early {
        crate::task::begin_head_start(&service, early);
    }
    let pod = match open_pod(&flags.socket, service.clone()).await {
        Ok(pod) => pod,
        Err(e) => {
            crate::task::end_head_start(&service).await;
            return Err(e);
        }
    };
    // Once nothing can fail before the exit that removes an untaken one.
    let cgroup_head = CGROUP_HEAD_START
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(plan) = cgroup_head {
        crate::task::begin_cgroup_head_start(&service, plan);
    }
    signal_started();
    let started_as = std::env::var(super::start::STARTED_AS_ENV).unwrap_or_default();
    // Routine lines are debug: containerd copies each line of the log FIFO
    // into its own log, about 0.5 ms of its CPU per line in a burst.
    tracing::debug!(socket = %pod.path, bootstrap = %started_as, "rund shim serving");

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
    if let Some(removed) = crate::task::discard_cgroup_head_start(&service) {
        let _ = removed.await;
    }
    crate::task::end_head_start(&service).await;
    pod.unlink();
    pod.close(&service).await;
    Ok(())
}

pub(super) fn ignore_sigpipe() {
    // SAFETY: ignoring SIGPIPE only changes this process's disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// The event publisher to containerd's `TTRPC_ADDRESS`, if it gave one.
pub(super) async fn connect_publisher() -> Result<Option<Publisher>, EntryError> {
    let ttrpc_address = std::env::var("TTRPC_ADDRESS").unwrap_or_default();
    if ttrpc_address.is_empty() {
        return Ok(None);
    }
    Ok(Some(Publisher::connect(&ttrpc_address).await?))
}

/// One pod's ttrpc server on its own socket.
pub(super) struct PodServer {
    server: Server,
    pub(super) path: String,
}

/// Binds `socket` (root only) and serves `service` on it as task v2, task v3
/// and the sandbox API.
pub(super) async fn open_pod(socket: &str, service: Arc<Service>) -> Result<PodServer, EntryError> {
    let (path, listener) = bind_pod(socket)?;
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixListener::from_std(listener))
    {
        Ok(l) => rund_proto::coalesce::listener(l),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(EntryError::Listener(e));
        }
    };
    serve_pod(path, listener, service).await
}

/// Binds a pod's socket, which only root (containerd) may connect to, as
/// with runc's shim.
pub(super) fn bind_pod(socket: &str) -> Result<(String, UnixListener), EntryError> {
    let path = socket.trim_start_matches("unix://").to_string();
    if let Some(dir) = Path::new(&path).parent() {
        std::fs::create_dir_all(dir).map_err(socket_err("mkdir", &dir.display().to_string()))?;
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(socket_err("bind", &path))?;
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(&path);
        return Err(socket_err("chmod", &path)(e));
    }
    Ok((path, listener))
}

/// Serves `service` on the connections `listener` yields.
pub(super) async fn serve_pod(
    path: String,
    listener: Listener,
    service: Arc<Service>,
) -> Result<PodServer, EntryError> {
    let task: Arc<dyn containerd_shim_protos::shim_async::Task + Send + Sync> =
        Arc::new(crate::task::TaskHandler(service.clone()));
    let mut services = create_task(task.clone());
    if let Some(v3) = create_task(task).remove(TASK_V2) {
        services.insert(TASK_V3.to_string(), v3);
    }
    let mut sandbox = crate::sandboxer::service(service.clone());
    super::activity::count(&mut services, &service);
    super::activity::count(&mut sandbox, &service);
    let mut server = Server::new()
        .add_listener(listener)
        .register_service(services)
        .register_service(sandbox);
    if let Err(e) = server.start().await {
        let _ = std::fs::remove_file(&path);
        return Err(EntryError::Server(e));
    }
    Ok(PodServer { server, path })
}

impl PodServer {
    /// First thing after the pod's exit signal: a `start` for the same pod id
    /// (`ctr run --rm` twice) must not find this server on its way out.
    /// Unlinked, the path is free for a new server, and the connections
    /// already made are still answered.
    pub(super) fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// After [`PodServer::unlink`]: the last events out, then the server.
    pub(super) async fn close(mut self, service: &Service) {
        // Every event answered before the connection to containerd closes.
        service.events.flush(FLUSH_LIMIT).await;
        // containerd runs the `delete` action once the connection closes:
        // no recycle may still be running then.
        crate::cgroups::recycle::settle(FLUSH_LIMIT).await;
        // The request that asked us to exit (Shutdown, ShutdownSandbox) is still
        // being answered: ttrpc's shutdown drops unsent replies, and containerd
        // fails RemovePodSandbox on a lost ShutdownSandbox reply.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let _ = self.server.shutdown().await;
    }
}

fn socket_err<'a>(
    op: &'static str,
    path: &'a str,
) -> impl FnOnce(std::io::Error) -> EntryError + 'a {
    move |source| EntryError::Socket {
        op,
        path: path.to_string(),
        source,
    }
}

/// Closes our stdout (the pipe `start` waits on) by pointing it at stderr.
pub(super) fn signal_started() {
    // SAFETY: dup2 onto fd 1; both fds are valid for the process lifetime.
    unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
}
