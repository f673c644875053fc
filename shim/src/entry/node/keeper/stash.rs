//! The node shim's side of its keeper: every fd whose close containerd or
//! an agent would notice (the control and pod sockets, containerd's
//! connections, the agents' sockets) is also held by the keeper, the node
//! shim's parent. If the node shim dies, the keeper starts another and hands
//! it those fds, so nothing on the other ends sees a close.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use std::collections::HashSet;

use rund_proto::coalesce::Coalesced;
use rund_proto::fdpass::{self, FdPassError};
use rund_proto::quiet::Quiet;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::inflight::{Frames, Seen};

/// What a kept fd is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Item {
    /// The node's control socket.
    Control,
    /// A pod's listening socket.
    Pod { socket: String },
    /// A containerd connection to a pod's socket.
    Conn { socket: String },
    /// A pod's agent: its ttrpc socket and fd side channel (two fds).
    Agent { socket: String, pid: i32 },
    /// A stdio fd the node shim copies through for one process.
    Io {
        socket: String,
        id: String,
        exec_id: String,
        role: crate::io::IoRole,
    },
}

impl Item {
    /// How many fds come with it.
    pub fn fds(&self) -> usize {
        match self {
            Item::Agent { .. } => 2,
            _ => 1,
        }
    }
}

/// One datagram between the node shim and its keeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum Msg {
    /// Hold these fds (both ways: a keeper replays them to a new shim, with
    /// the frames of the long polls still open on a connection).
    Keep {
        key: u64,
        item: Item,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending: Vec<Vec<u8>>,
        /// The stream ids of the other requests open on it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unanswered: Vec<u32>,
    },
    /// A long poll arrived on the connection kept under `key` ([`super::inflight`]).
    Pending {
        key: u64,
        stream: u32,
        frame: Vec<u8>,
    },
    /// Another request arrived on it: not replayed, answered with an error
    /// if this shim dies first.
    Open { key: u64, stream: u32 },
    /// It has been answered.
    Answered { key: u64, stream: u32 },
    /// Close the fds kept under `key`.
    Release { key: u64 },
    /// The node shim serves: from now on its death is a crash.
    Up,
    /// End of the replay.
    Done,
    /// The keeper reaped `pid`, an agent of a dead node shim.
    Reaped { pid: i32, status: u32 },
}

pub fn send(sock: BorrowedFd<'_>, msg: &Msg, fds: &[BorrowedFd<'_>]) -> Result<(), FdPassError> {
    fdpass::send_msg(sock, msg, fds)
}

pub fn recv(sock: BorrowedFd<'_>) -> Result<(Msg, Vec<OwnedFd>), FdPassError> {
    fdpass::recv_msg(sock)
}

/// The node shim's end of the keeper's socket.
pub struct Stash {
    sock: OwnedFd,
    next: AtomicU64,
    pub generation: u64,
}

impl Stash {
    pub fn new(sock: OwnedFd, first_key: u64, generation: u64) -> Arc<Stash> {
        Arc::new(Stash {
            sock,
            next: AtomicU64::new(first_key),
            generation,
        })
    }

    /// Has the keeper hold copies of `fds` until the returned guard drops.
    pub fn keep(self: &Arc<Self>, item: Item, fds: &[BorrowedFd<'_>]) -> Kept {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let msg = Msg::Keep {
            key,
            item,
            pending: Vec::new(),
            unanswered: Vec::new(),
        };
        if let Err(e) = send(self.sock.as_fd(), &msg, fds) {
            // Only a restart is lost: the pod runs on.
            tracing::warn!("keeper: keeping fds: {e}");
        }
        self.kept(key)
    }

    /// The guard for fds the keeper holds already (replayed to us).
    pub fn kept(self: &Arc<Self>, key: u64) -> Kept {
        Kept {
            stash: self.clone(),
            key,
        }
    }

    pub fn up(&self) {
        let _ = send(self.sock.as_fd(), &Msg::Up, &[]);
    }

    fn tell(&self, msg: &Msg) {
        let _ = send(self.sock.as_fd(), msg, &[]);
    }
}

/// Fds the keeper holds; dropped, the keeper closes them.
pub struct Kept {
    stash: Arc<Stash>,
    key: u64,
}

impl Kept {
    /// A request open on this connection was answered outside its stream
    /// (an error written by the next node shim): the keeper lets it go.
    pub fn answered(&self, stream: u32) {
        self.stash.tell(&Msg::Answered {
            key: self.key,
            stream,
        });
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = send(
            self.stash.sock.as_fd(),
            &Msg::Release { key: self.key },
            &[],
        );
    }
}

/// A containerd connection whose copy the keeper holds while it is open,
/// with the requests open on it.
pub struct KeptStream {
    stream: Coalesced<Quiet>,
    kept: Kept,
    /// Replayed requests, read before the socket.
    prefix: Vec<u8>,
    read: Frames,
    written: Frames,
    /// Requests read and not yet answered, by stream id.
    open: HashSet<u32>,
}

impl KeptStream {
    /// `prefix`: the frames of the long polls a dead node shim left open.
    pub fn new(stream: Quiet, kept: Kept, prefix: Vec<u8>) -> Self {
        KeptStream {
            stream: Coalesced::new(stream),
            kept,
            prefix,
            read: Frames::default(),
            written: Frames::default(),
            open: HashSet::new(),
        }
    }

    fn saw_read(&mut self, bytes: &[u8]) {
        let key = self.kept.key;
        for seen in self.read.feed(bytes) {
            let (stream, msg) = match seen {
                Seen::Request { stream, frame } => (stream, Msg::Pending { key, stream, frame }),
                Seen::Other { stream } => (stream, Msg::Open { key, stream }),
                Seen::Response { .. } => continue,
            };
            self.open.insert(stream);
            self.kept.stash.tell(&msg);
        }
    }

    fn saw_written(&mut self, bytes: &[u8]) {
        for seen in self.written.feed(bytes) {
            if let Seen::Response { stream } = seen {
                if self.open.remove(&stream) {
                    let key = self.kept.key;
                    self.kept.stash.tell(&Msg::Answered { key, stream });
                }
            }
        }
    }
}

impl AsyncRead for KeptStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let head: Vec<u8> = self.prefix.drain(..n).collect();
            buf.put_slice(&head);
            self.saw_read(&head);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.saw_read(&buf.filled()[before..]);
        }
        r
    }
}

impl AsyncWrite for KeptStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.saw_written(&buf[..n]);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    #[test]
    fn kept_fds_are_released_on_drop() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let stash = Stash::new(a, 5, 0);
        let f = std::fs::File::open("/dev/null").unwrap();
        let kept = stash.keep(
            Item::Pod {
                socket: "/s".into(),
            },
            &[f.as_fd()],
        );
        let (msg, fds) = recv(b.as_fd()).unwrap();
        assert_eq!(
            msg,
            Msg::Keep {
                key: 5,
                item: Item::Pod {
                    socket: "/s".into()
                },
                pending: vec![],
                unanswered: vec![],
            }
        );
        assert_eq!(fds.len(), 1);
        drop(kept);
        assert_eq!(recv(b.as_fd()).unwrap().0, Msg::Release { key: 5 });
    }
}
