//! Async reads on the agent's datagram sockets: the fd side channel and the
//! set-up channels of forked children.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use rund_proto::fdpass::{self, FdHeader, FdKind, FdPassError};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::container::sync::ChildMsg;

pub fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Registers an owned socket with the runtime, for reads only: sends go
/// straight out, and a writability interest would wake the runtime each time
/// the peer reads.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the fd stays open
    // and unchanged until it is dropped or taken back with into_inner().
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// One fd batch: its kinds and fds.
pub type FdMsg = (Vec<FdKind>, Vec<OwnedFd>);

/// How long a request waits for its batch. The shim sends the batch before
/// the request, so only a broken or hostile peer ever waits this long.
pub const TAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Batches nobody claimed are dropped past this many (oldest first).
const MAX_PENDING: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("fd batch {seq} did not arrive within {}s", TAKE_TIMEOUT.as_secs())]
    Timeout { seq: u64 },
    #[error("fd batch {seq} was already taken or never sent")]
    Gone { seq: u64 },
    #[error("the fd side channel is closed: {0}")]
    Closed(String),
}

#[derive(Default)]
struct Pending {
    batches: HashMap<u64, FdMsg>,
    order: Vec<u64>,
    /// Highest seq received so far: a smaller missing one will never come.
    high: u64,
    closed: Option<String>,
}

/// The fd side channel (fd 4). A reader task files every batch by its
/// number; requests take theirs without holding any lock across a receive.
#[derive(Clone)]
pub struct FdChannel {
    pending: Arc<Mutex<Pending>>,
    arrived: Arc<Notify>,
}

impl FdChannel {
    /// Starts the reader. `on_close` runs once when the shim's end closes:
    /// the shim is gone, and with it everyone allowed to drive this sandbox.
    /// A batch of one [`FdKind::Conn`] is not filed: it goes to `conns`, a
    /// restarted shim's new ttrpc connection.
    pub fn spawn(
        sock: OwnedFd,
        conns: tokio::sync::mpsc::UnboundedSender<OwnedFd>,
        on_close: impl FnOnce() + Send + 'static,
    ) -> io::Result<Self> {
        nonblocking(&sock)?;
        let sock = register(sock)?;
        let ch = FdChannel {
            pending: Default::default(),
            arrived: Default::default(),
        };
        let reader = ch.clone();
        tokio::spawn(async move {
            let why = loop {
                match recv(&sock).await {
                    Ok((h, mut fds)) if h.fds == [FdKind::Conn] && fds.len() == 1 => {
                        crate::info!("a restarted shim connects anew");
                        let _ = conns.send(fds.remove(0));
                    }
                    Ok((h, fds)) => reader.file(h, fds),
                    Err(FdPassError::Closed) => break "the shim closed it".to_string(),
                    // A malformed batch is dropped (its fds are owned and so closed).
                    Err(e @ (FdPassError::Header(_) | FdPassError::Count { .. })) => {
                        crate::warn!("fd side channel: dropped a bad batch: {e}");
                    }
                    Err(e) => break e.to_string(),
                }
            };
            reader.lock().closed = Some(why);
            reader.arrived.notify_waiters();
            on_close();
        });
        Ok(ch)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn file(&self, h: FdHeader, fds: Vec<OwnedFd>) {
        crate::debug!("fd batch {}: {:?}", h.seq, h.fds);
        let mut p = self.lock();
        p.high = p.high.max(h.seq);
        p.batches.insert(h.seq, (h.fds, fds));
        p.order.push(h.seq);
        while p.order.len() > MAX_PENDING {
            let old = p.order.remove(0);
            p.batches.remove(&old);
        }
        drop(p);
        self.arrived.notify_waiters();
    }

    /// Takes batch `seq`, waiting up to [`TAKE_TIMEOUT`] for it.
    pub async fn take(&self, seq: u64) -> Result<FdMsg, ChannelError> {
        let wait = async {
            loop {
                let notified = self.arrived.notified();
                {
                    let mut p = self.lock();
                    if let Some(m) = p.batches.remove(&seq) {
                        p.order.retain(|s| *s != seq);
                        return Ok(m);
                    }
                    if let Some(why) = &p.closed {
                        return Err(ChannelError::Closed(why.clone()));
                    }
                    if seq <= p.high && seq != 0 {
                        // Batches arrive in order: this one was taken or dropped.
                        return Err(ChannelError::Gone { seq });
                    }
                }
                notified.await;
            }
        };
        tokio::time::timeout(TAKE_TIMEOUT, wait)
            .await
            .unwrap_or(Err(ChannelError::Timeout { seq }))
    }
}

async fn recv(sock: &AsyncFd<OwnedFd>) -> Result<(FdHeader, Vec<OwnedFd>), FdPassError> {
    loop {
        let mut guard = sock
            .readable()
            .await
            .map_err(|e| FdPassError::Io(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        let r = guard.try_io(|s| match fdpass::recv(s.get_ref().as_fd()) {
            Err(FdPassError::Io(Errno::EAGAIN)) => Err(io::ErrorKind::WouldBlock.into()),
            other => Ok(other),
        });
        if let Ok(Ok(r)) = r {
            return r;
        }
    }
}

/// What a forked child reported once its set-up stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Ready,
    /// Stopped before pivot_root, waiting to be resumed.
    Paused,
}

/// What the child reported on its way to a stop.
#[derive(Default)]
pub struct Reports {
    /// The pid that runs the workload, when it differs from the forked one.
    pub pid: Option<i32>,
    /// The container's namespaces (name, fd), for execs.
    pub ns: Vec<(String, OwnedFd)>,
}

/// Why a forked child did not settle.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    #[error("namespace report: names and fds do not match")]
    NamespaceMismatch,
    /// The child's own report of what failed.
    #[error("{0}")]
    Child(String),
    #[error("the process died during set-up without reporting why (see the sandbox log)")]
    Died,
    #[error(transparent)]
    Channel(FdPassError),
}

/// Reads the child's reports until it is ready, paused or failed. With
/// `expect_pid`, the intermediate's `Pid` report is awaited too.
pub async fn await_settled(
    sock: &AsyncFd<OwnedFd>,
    expect_pid: bool,
) -> Result<(Settled, Reports), SettleError> {
    let mut r = Reports::default();
    let mut settled = None;
    while settled.is_none() || (expect_pid && r.pid.is_none()) {
        let (msg, fds) = match next_msg(sock).await {
            Ok((m, fds)) => (Ok(m), fds),
            Err(e) => (Err(e), Vec::new()),
        };
        match msg {
            Ok(ChildMsg::Namespaces { names }) if names.len() == fds.len() => {
                r.ns = names.into_iter().zip(fds).collect();
            }
            Ok(ChildMsg::Namespaces { .. }) => return Err(SettleError::NamespaceMismatch),
            Ok(ChildMsg::Pid { pid: p }) => r.pid = Some(p),
            Ok(ChildMsg::Ready) => settled = Some(Settled::Ready),
            Ok(ChildMsg::Paused) => settled = Some(Settled::Paused),
            Ok(ChildMsg::Error { message }) => return Err(SettleError::Child(message)),
            Err(FdPassError::Closed) => return Err(SettleError::Died),
            Err(e) => return Err(SettleError::Channel(e)),
        }
    }
    Ok((settled.unwrap_or(Settled::Ready), r))
}

async fn next_msg(sock: &AsyncFd<OwnedFd>) -> Result<(ChildMsg, Vec<OwnedFd>), FdPassError> {
    loop {
        let mut guard = sock
            .readable()
            .await
            .map_err(|e| FdPassError::Io(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))))?;
        let r = guard.try_io(|s| match fdpass::recv_msg(s.get_ref().as_fd()) {
            Err(FdPassError::Io(Errno::EAGAIN)) => Err(io::ErrorKind::WouldBlock.into()),
            other => Ok(other),
        });
        if let Ok(Ok(r)) = r {
            return r;
        }
    }
}
