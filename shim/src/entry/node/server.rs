//! The node's shim: a control socket that admits pods, and one ttrpc server
//! per pod on the pod's own socket, all on one thread (mounts, forks and
//! cgroup work go to the blocking pool). A pod's server closes
//! on the pod's own exit signal (Shutdown, ShutdownSandbox), as a per-pod
//! shim would exit; the process leaves after [`LINGER`] without pods.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

use super::super::error::EntryError;
use super::super::flags::Flags;
use super::super::serve;
use super::keeper::adopt;
use super::keeper::stash::{Item, Stash};
use super::keeper::Handoff;
use super::wire::{self, PodRequest};
use crate::config::RundConfig;
use crate::sandbox::fostered::Fostered;
use crate::sandbox::warm::{Template, WarmPool};
use crate::task::events::Events;
use crate::task::exit_signal::ExitSignal;
use crate::task::publish::Publisher;
use crate::task::snapshot::PodMeta;
use crate::task::Service;
use rund_cgroup::{CgroupConfig, Cgroups};

/// How long the node's shim stays with no pod: pods come and go in bursts.
pub const LINGER: Duration = Duration::from_secs(2);
/// A `start` sends its one line at once.
const REQUEST_LIMIT: Duration = Duration::from_secs(10);
/// How long SIGTERM waits for the pods' servers to close.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(60);

pub(super) struct Node {
    publisher: Option<Publisher>,
    /// The keeper's copies of our fds.
    pub(super) stash: Arc<Stash>,
    /// Statuses of agents a dead node shim started, as the keeper reaps them.
    pub(super) fostered: Arc<Fostered>,
    /// Where each pod's record goes.
    pub(super) records: PathBuf,
    pods: Mutex<Pods>,
    /// Told when a pod's server has closed.
    changed: Notify,
    /// Warm agents, launched from the first admitted pod's config.
    warm: std::sync::OnceLock<Option<Arc<WarmPool>>>,
    /// The cgroup set-up (hierarchies, pool and its one refiller thread),
    /// made once per `[cgroup]` config, not once per pod.
    cgroups: Mutex<Vec<(CgroupConfig, Arc<Cgroups>)>>,
}

#[derive(Default)]
pub(super) struct Pods {
    /// The pods served, by socket address; a pod leaves this map as soon as
    /// its exit signal comes, so the same address can be served anew.
    by_socket: HashMap<String, Arc<Service>>,
    /// Sockets whose admission is under way (hand-overs run side by side).
    admitting: HashSet<String>,
    /// Pod servers not yet closed, those on their way out included.
    servers: usize,
}

impl Node {
    /// Gives `service` the node's warm agents, launching them from its config
    /// if it is the node's first pod, and the node's cgroup set-up.
    pub(super) fn share(&self, service: &Service, debug: bool) {
        let pool = self
            .warm
            .get_or_init(|| warm_pool(&service.config(), debug))
            .clone();
        if let Some(pool) = pool {
            let _ = service.warm.set(pool);
        }
        let want = service.config().cgroup.clone();
        let mut made = self.cgroups.lock().unwrap_or_else(|e| e.into_inner());
        match made.iter().find(|(config, _)| *config == want) {
            Some((_, cgroups)) => service.use_cgroups(cgroups.clone()),
            // A failure is left to the pod's Create to report.
            None => {
                if let Ok(cgroups) = service.cgroups() {
                    made.push((want, cgroups));
                }
            }
        }
    }

    pub(super) fn publisher(&self) -> Option<Publisher> {
        self.publisher.clone()
    }

    pub(super) fn pods(&self) -> std::sync::MutexGuard<'_, Pods> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once no pod has been served for `LINGER`.
    async fn idle(&self) {
        loop {
            let changed = self.changed.notified();
            if self.pods().servers == 0 {
                tokio::select! {
                    _ = tokio::time::sleep(LINGER) => return,
                    _ = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// Runs the node's shim (forked by its keeper); its stdout is `start`'s pipe
/// in the first generation.
pub fn main(flags: Flags, control: String, log: PathBuf, handoff: Handoff) -> i32 {
    super::super::set_subreaper();
    rund_sys::trim::lean_malloc(128 << 10);
    let replay = match adopt::read_replay(&handoff.stash) {
        Ok(r) => r,
        Err(e) => {
            print!("node keeper: {e}");
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(64)
        .thread_keep_alive(crate::entry::serve::BLOCKING_KEEP_ALIVE)
        .on_thread_stop(rund_sys::trim::thread_exit)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            print!("{}", EntryError::Runtime(e));
            return 1;
        }
    };
    let r = rt.block_on(run(flags, &control, &log, handoff, replay));
    rt.shutdown_timeout(Duration::from_secs(1));
    match r {
        Ok(()) => 0,
        Err(e) => {
            // `start` reads our stdout until it closes: an error there is reported.
            print!("{e}");
            1
        }
    }
}

async fn run(
    flags: Flags,
    control: &str,
    log: &Path,
    handoff: Handoff,
    mut replay: adopt::Replay,
) -> Result<(), EntryError> {
    // No pod's bundle is this shim's: it must not hold one busy.
    let _ = std::env::set_current_dir("/");
    let generation = handoff.generation;
    open_log(log, flags.debug, generation == 0);
    serve::ignore_sigpipe();
    let node = Arc::new(Node {
        publisher: serve::connect_publisher().await?,
        stash: Stash::new(handoff.stash, replay.next_key(), generation),
        fostered: Default::default(),
        records: log.with_extension("pods"),
        pods: Mutex::new(Pods::default()),
        changed: Notify::new(),
        warm: std::sync::OnceLock::new(),
        cgroups: Default::default(),
    });
    adopt::hear_news(handoff.news, node.fostered.clone());
    let (listener, _kept_control) = match replay.take_control(&node.stash) {
        Some((std_listener, kept)) => {
            let _ = std_listener.set_nonblocking(true);
            let l = UnixListener::from_std(std_listener).map_err(|source| EntryError::Socket {
                op: "adopt",
                path: control.to_string(),
                source,
            })?;
            (l, kept)
        }
        None => {
            let _ = std::fs::remove_file(control);
            let l = bind(control)?;
            let kept = node.stash.keep(Item::Control, &[l.as_fd()]);
            (l, kept)
        }
    };
    if generation > 0 {
        adopt::pods(&node, replay).await;
    } else {
        // Records of a node that went down with its pods.
        let _ = std::fs::remove_dir_all(&node.records);
    }
    serve::signal_started();
    node.stash.up();
    tracing::info!(control, generation, "rund node shim serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(EntryError::Runtime)?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(handle(node.clone(), stream));
                }
            }
            _ = term.recv() => {
                tracing::info!("SIGTERM: tearing every pod down");
                teardown(&node).await;
                super::remove_node_files(control);
                break;
            }
            _ = node.idle() => {
                if leave(&node, control) {
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_file(control);
    if let Some(pool) = node.warm.get().and_then(Option::as_ref) {
        pool.close();
    }
    Ok(())
}

fn open_log(log: &Path, debug: bool, fresh: bool) {
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // A node's log starts with its keeper; earlier ones are replaced.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(fresh)
        .mode(0o600)
        .open(log);
    crate::logging::init(log, debug);
}

fn bind(control: &str) -> Result<UnixListener, EntryError> {
    let err = |op: &'static str| {
        move |source| EntryError::Socket {
            op,
            path: control.to_string(),
            source,
        }
    };
    let listener = UnixListener::bind(control).map_err(err("bind"))?;
    // Only root (containerd's `start`) may hand pods over.
    if let Err(e) = std::fs::set_permissions(control, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(control);
        return Err(err("chmod")(e));
    }
    Ok(listener)
}

/// Leaves if still without pods once the node lock is held: no `start` is
/// then between its connect and the answer, and a later one finds no socket.
/// Never waits for the lock: a `start` holding it waits for this loop to
/// accept its connection.
fn leave(node: &Node, control: &str) -> bool {
    let Ok(Some(lock)) = super::NodeLock::try_take(control) else {
        return false;
    };
    if node.pods().servers > 0 {
        return false;
    }
    let _ = std::fs::remove_file(control);
    lock.remove();
    tracing::info!("no pod for {LINGER:?}: leaving");
    true
}

async fn handle(node: Arc<Node>, stream: UnixStream) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    match stream.peer_cred() {
        Ok(c) if c.uid() == euid => {}
        other => {
            tracing::warn!("control connection refused: peer {other:?}");
            return;
        }
    }
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(wire::MAX_LINE as u64));
    let read = tokio::time::timeout(REQUEST_LIMIT, reader.read_line(&mut line)).await;
    let reply = match read {
        // A check that the node listens (`start`'s, once it forked the
        // node): nothing to answer.
        Ok(Ok(0)) => return tracing::debug!("control connection closed unused"),
        Ok(Ok(_)) => match PodRequest::parse(&line) {
            Ok(req) => admit(&node, req).await.map(|()| wire::OK.to_string()),
            Err(e) => Err(e),
        },
        Ok(Err(e)) => Err(format!("reading the request: {e}")),
        Err(_) => Err("no request in time".into()),
    };
    let reply = reply.unwrap_or_else(|e| {
        tracing::warn!("pod refused: {e}");
        e.replace('\n', " ")
    });
    let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
}

/// Serves one more pod on its own socket until its exit signal. A second
/// hand-over of a pod being admitted waits for the first's outcome.
async fn admit(node: &Arc<Node>, req: PodRequest) -> Result<(), String> {
    loop {
        let changed = node.changed.notified();
        {
            let mut pods = node.pods();
            if pods.by_socket.contains_key(&req.socket) {
                return Ok(());
            }
            if pods.admitting.insert(req.socket.clone()) {
                break;
            }
        }
        changed.await;
    }
    let r = admit_new(node, &req).await;
    node.pods().admitting.remove(&req.socket);
    node.changed.notify_waiters();
    r
}

async fn admit_new(node: &Arc<Node>, req: &PodRequest) -> Result<(), String> {
    let config =
        RundConfig::load(req.config_path.as_deref().map(Path::new)).map_err(|e| e.to_string())?;
    let exit = Arc::new(ExitSignal::default());
    let events = Events::new(node.publisher.clone(), req.namespace.clone());
    let service = Arc::new(Service::new(config, events, exit.clone(), req.debug));
    if let Some(path) = &req.config_path {
        service.set_config_in_force(path.into());
    }
    node.share(&service, req.debug);
    let (path, listener) = serve::bind_pod(&req.socket).map_err(|e| e.to_string())?;
    let meta = PodMeta {
        socket: req.socket.clone(),
        namespace: req.namespace.clone(),
        config_path: req.config_path.clone(),
        debug: req.debug,
    };
    let kept = node.stash.keep(
        Item::Pod {
            socket: req.socket.clone(),
        },
        &[listener.as_fd()],
    );
    adopt::link(node, &service, meta);
    service.persist().await;
    let accepts =
        adopt::accepts(node, &req.socket, Vec::new(), listener, kept).map_err(|e| e.to_string())?;
    let pod = match serve::serve_pod(path, accepts, service.clone()).await {
        Ok(p) => p,
        Err(e) => {
            adopt::forget(&service);
            return Err(e.to_string());
        }
    };
    serve_until_exit(node, req.socket.clone(), service, exit, pod);
    Ok(())
}

/// Counts the pod in, and out again once its exit signal has come and its
/// server has closed.
pub(super) fn serve_until_exit(
    node: &Arc<Node>,
    socket: String,
    service: Arc<Service>,
    exit: Arc<ExitSignal>,
    pod: serve::PodServer,
) {
    let req_socket = socket;
    let served = {
        let mut pods = node.pods();
        pods.by_socket.insert(req_socket.clone(), service.clone());
        pods.servers += 1;
        pods.servers
    };
    tracing::info!(socket = %pod.path, pods = served, "pod admitted");
    let node = node.clone();
    tokio::spawn(async move {
        exit.wait().await;
        pod.unlink();
        adopt::forget(&service);
        {
            let mut pods = node.pods();
            if pods
                .by_socket
                .get(&req_socket)
                .is_some_and(|s| Arc::ptr_eq(s, &service))
            {
                pods.by_socket.remove(&req_socket);
            }
        }
        pod.close(&service).await;
        let left = {
            let mut pods = node.pods();
            pods.servers -= 1;
            pods.servers
        };
        tracing::info!(socket = %req_socket, pods = left, "pod closed");
        node.changed.notify_waiters();
    });
}

/// The node's warm agents, from the config of its first pod; they start
/// launching at once.
fn warm_pool(config: &RundConfig, debug: bool) -> Option<Arc<WarmPool>> {
    if config.sandbox.warm == 0 {
        return None;
    }
    let pool = WarmPool::new(config.sandbox.warm, Template::of(config, debug));
    pool.refill();
    tracing::info!(warm = config.sandbox.warm, "warm sandboxes on");
    Some(pool)
}

/// SIGTERM: every pod torn down as a per-pod shim would on SIGTERM.
async fn teardown(node: &Arc<Node>) {
    let pods: Vec<Arc<Service>> = node.pods().by_socket.values().cloned().collect();
    for svc in pods {
        tokio::spawn(async move {
            crate::task::teardown_all(&svc).await;
            svc.exit.signal();
        });
    }
    let _ = tokio::time::timeout(TEARDOWN_LIMIT, async {
        loop {
            let changed = node.changed.notified();
            if node.pods().servers == 0 {
                return;
            }
            changed.await;
        }
    })
    .await;
}
