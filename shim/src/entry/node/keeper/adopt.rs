//! A node shim started by its keeper after the last one died: it takes the
//! kept fds back ([`Replay`]) and serves each pod on, from the pod's record
//! and its agent. Also the parts every pod's server shares with a fresh
//! node: keeping its socket and containerd's connections, linking its
//! `Service` to its record.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener as StdListener, UnixStream as StdStream};
use std::path::PathBuf;
use std::sync::Arc;

use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use futures::stream::{self, StreamExt};
use rund_proto::quiet::Quiet;
use tokio::net::UnixListener;

use super::stash::{self, Item, Kept, KeptStream, Msg, Stash};
use crate::entry::node::server::{serve_until_exit, Node};
use crate::sandbox::fostered::Fostered;
use crate::sandbox::Agent;
use crate::task::events::Events;
use crate::task::exit_signal::ExitSignal;
use crate::task::snapshot::{self, AdoptedAgent, NodeLink, PodMeta};
use crate::task::Service;

/// What the keeper handed over, by key.
#[derive(Default)]
pub struct Replay {
    items: Vec<Handed>,
}

/// One kept item as the keeper hands it over.
struct Handed {
    key: u64,
    item: Item,
    fds: Vec<OwnedFd>,
    /// The frames of the long polls open on a connection, to read again.
    replayed: Vec<u8>,
    /// The other requests open on it, to answer with an error.
    unanswered: Vec<u32>,
}

impl Replay {
    /// The first key this shim may use: above every replayed one.
    pub fn next_key(&self) -> u64 {
        self.items.iter().map(|h| h.key + 1).max().unwrap_or(1)
    }

    /// The control socket, if the keeper holds it.
    pub fn take_control(&mut self, stash: &Arc<Stash>) -> Option<(StdListener, Kept)> {
        let i = self.items.iter().position(|h| h.item == Item::Control)?;
        let mut h = self.items.remove(i);
        Some((StdListener::from(h.fds.remove(0)), stash.kept(h.key)))
    }
}

/// Reads the keeper's replay, up to its end.
pub fn read_replay(sock: &OwnedFd) -> Result<Replay, String> {
    let mut replay = Replay::default();
    loop {
        match stash::recv(sock.as_fd()).map_err(|e| e.to_string())? {
            (
                Msg::Keep {
                    key,
                    item,
                    pending,
                    unanswered,
                },
                fds,
            ) if fds.len() == item.fds() => replay.items.push(Handed {
                key,
                item,
                fds,
                replayed: pending.concat(),
                unanswered,
            }),
            (Msg::Done, _) => return Ok(replay),
            (other, _) => return Err(format!("unexpected in the replay: {other:?}")),
        }
    }
}

/// Files the keeper's word on reaped agents.
pub fn hear_news(news: OwnedFd, fostered: Arc<Fostered>) {
    // Ours alone: the keeper's end is another open file.
    let news = std::os::unix::net::UnixDatagram::from(news);
    if news.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(fd) = crate::io::async_fd(news.into()) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            match stash::recv(fd.get_ref().as_fd()) {
                Ok((Msg::Reaped { pid, status }, _)) => fostered.record(pid, status),
                Ok(_) => {}
                Err(rund_proto::fdpass::FdPassError::Io(nix::errno::Errno::EAGAIN)) => {
                    ready.clear_ready()
                }
                Err(_) => return,
            }
        }
    });
}

/// Links a pod's service to its record and to the keeper.
pub(in crate::entry::node) fn link(node: &Arc<Node>, service: &Arc<Service>, pod: PodMeta) {
    let stash = node.stash.clone();
    let socket = pod.socket.clone();
    let keep_io = {
        let (stash, socket) = (stash.clone(), socket.clone());
        move |id: &str, exec_id: &str| -> crate::io::KeepIo {
            let (stash, socket) = (stash.clone(), socket.clone());
            let (id, exec_id) = (id.to_string(), exec_id.to_string());
            Arc::new(move |role, fd| {
                let item = Item::Io {
                    socket: socket.clone(),
                    id: id.clone(),
                    exec_id: exec_id.clone(),
                    role,
                };
                Some(Box::new(stash.keep(item, &[fd])) as crate::io::KeepGuard)
            })
        }
    };
    let link = NodeLink {
        keep_io: Box::new(keep_io),
        record: record_path(node, &pod.socket),
        writing: Default::default(),
        pod,
        keep_agent: Box::new(move |agent: &Agent| {
            let fds = agent
                .dup_fds()
                .inspect_err(|e| tracing::warn!("keeping agent fds: {e}"))
                .ok()?;
            let item = Item::Agent {
                socket: socket.clone(),
                pid: agent.pid,
            };
            let kept = stash.keep(item, &[fds[0].as_fd(), fds[1].as_fd()]);
            Some(Box::new(kept) as Box<dyn Send + Sync>)
        }),
    };
    let _ = service.node.set(link);
}

/// The pod is gone: its record too.
pub fn forget(service: &Service) {
    if let Some(link) = service.node.get() {
        let _ = std::fs::remove_file(&link.record);
    }
}

fn record_path(node: &Node, socket: &str) -> PathBuf {
    let name = socket.rsplit('/').next().unwrap_or(socket);
    node.records.join(format!("{name}.json"))
}

/// A containerd connection a dead node shim served.
pub(in crate::entry::node) struct OldConn {
    stream: StdStream,
    kept: Kept,
    replayed: Vec<u8>,
    unanswered: Vec<u32>,
}

/// Containerd's connections to a pod: those kept from before, then each one
/// accepted, kept with the keeper while open. `listener_kept` lives as long
/// as the listener.
pub(in crate::entry::node) fn accepts(
    node: &Arc<Node>,
    socket: &str,
    adopted: Vec<OldConn>,
    listener: StdListener,
    listener_kept: Kept,
) -> std::io::Result<Listener> {
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let mut old = Vec::new();
    for OldConn {
        stream: s,
        kept,
        replayed,
        unanswered,
    } in adopted
    {
        // Before anything else is written to it: whole frames, in order.
        s.set_nonblocking(false)?;
        for stream in unanswered {
            tracing::warn!(%socket, stream, "answering a request the dead node shim left open");
            (&s).write_all(&super::inflight::unanswered(stream))?;
            kept.answered(stream);
        }
        s.set_nonblocking(true)?;
        old.push(Ok(KeptStream::new(Quiet::new(s.into())?, kept, replayed)));
    }
    let (stash, socket) = (node.stash.clone(), socket.to_string());
    let new = stream::unfold((listener, listener_kept), move |(listener, kept)| {
        let (stash, socket) = (stash.clone(), socket.clone());
        async move {
            let conn = listener.accept().await.and_then(|(s, _)| {
                let s = Quiet::from_tokio(s)?;
                let k = stash.keep(Item::Conn { socket }, &[s.as_fd()]);
                Ok(KeptStream::new(s, k, Vec::new()))
            });
            Some((conn, (listener, kept)))
        }
    });
    Ok(Listener::new(stream::iter(old).chain(new)))
}

/// Serves every pod the replay has a socket and a record for; what has no
/// record (the pod closed as the last shim died) is let go.
pub(in crate::entry::node) async fn pods(node: &Arc<Node>, replay: Replay) {
    let generation = node.stash.generation;
    let mut by_socket: HashMap<String, PodFds> = HashMap::new();
    for Handed {
        key,
        item,
        mut fds,
        replayed,
        unanswered,
    } in replay.items
    {
        let kept = node.stash.kept(key);
        match item {
            Item::Pod { socket } => {
                by_socket.entry(socket).or_default().listener =
                    Some((StdListener::from(fds.remove(0)), kept))
            }
            Item::Conn { socket } => by_socket.entry(socket).or_default().conns.push(OldConn {
                stream: StdStream::from(fds.remove(0)),
                kept,
                replayed,
                unanswered,
            }),
            Item::Agent { socket, pid } => {
                by_socket.entry(socket).or_default().agent = Some((pid, fds, kept))
            }
            Item::Io {
                socket,
                id,
                exec_id,
                role,
            } => {
                let fd = fds.remove(0);
                by_socket
                    .entry(socket)
                    .or_default()
                    .io
                    .entry((id, exec_id))
                    .or_default()
                    .insert(role, (fd, Box::new(kept) as crate::io::KeepGuard));
            }
            Item::Control => {}
        }
    }
    for (socket, fds) in by_socket {
        match pod(node, &socket, fds, generation).await {
            Ok(()) => tracing::info!(%socket, "pod adopted"),
            Err(e) => tracing::warn!(%socket, "pod not adopted: {e}"),
        }
    }
}

#[derive(Default)]
struct PodFds {
    listener: Option<(StdListener, Kept)>,
    conns: Vec<OldConn>,
    agent: Option<(i32, Vec<OwnedFd>, Kept)>,
    io: HashMap<(String, String), crate::io::AdoptedIo>,
}

async fn pod(node: &Arc<Node>, socket: &str, fds: PodFds, generation: u64) -> Result<(), String> {
    let (listener, listener_kept) = fds.listener.ok_or("no listening socket kept")?;
    let path = record_path(node, socket);
    let record = snapshot::read_record(&path).map_err(|e| format!("record: {e}"))?;
    let config = crate::config::RundConfig::load(
        record.pod.config_path.as_deref().map(std::path::Path::new),
    )
    .map_err(|e| e.to_string())?;
    let exit = Arc::new(ExitSignal::default());
    let events = Events::new(node.publisher(), record.pod.namespace.clone());
    let service = Arc::new(Service::new(config, events, exit.clone(), record.pod.debug));
    link(node, &service, record.pod.clone());
    node.share(&service, record.pod.debug);
    let ended = record.sandbox.as_ref().and_then(|r| r.exit);
    let agent = match (fds.agent, ended) {
        // The last shim saw the agent end: nothing to reach.
        (_, Some(status)) => AdoptedAgent::Gone(status),
        (Some((pid, mut fds, kept)), None) => {
            let fdpass = fds.remove(1);
            drop(fds);
            // Batches number above any the dead shim sent.
            match Agent::adopt(pid, fdpass, generation << 40).await {
                Ok(a) => {
                    drop(kept);
                    let kept = (service.node.get().expect("linked").keep_agent)(&a);
                    AdoptedAgent::Live(a, kept.unwrap_or_else(|| Box::new(())))
                }
                // Unreachable because it died: the keeper's word says so.
                Err(e) => match node.fostered.reaped(pid).await {
                    Some(status) => {
                        tracing::info!(%socket, pid, status, "the pod's agent died meanwhile: {e}");
                        AdoptedAgent::Gone(status)
                    }
                    None => return Err(format!("agent {pid}: {e}")),
                },
            }
        }
        (None, None) => AdoptedAgent::None,
    };
    service
        .restore(&record, agent, node.fostered.clone(), fds.io)
        .await?;
    service.persist().await;
    let accepts =
        accepts(node, socket, fds.conns, listener, listener_kept).map_err(|e| e.to_string())?;
    let pod = crate::entry::serve::serve_pod(
        socket.trim_start_matches("unix://").to_string(),
        accepts,
        service.clone(),
    )
    .await
    .map_err(|e| e.to_string())?;
    serve_until_exit(node, socket.to_string(), service, exit, pod);
    Ok(())
}
