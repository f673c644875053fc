//! Async reads on the agent's datagram sockets (fd side channel, set-up channels).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use rund_proto::fdpass::{self, FdHeader, FdKind, FdPassError};
use rund_proto::launch::{self, SyncError};
use tokio::io::unix::AsyncFd;

use crate::container::sync::ChildMsg;

pub fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Registers an owned socket with the runtime.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the fd stays open
    // and unchanged until it is dropped or taken back with into_inner().
    unsafe { AsyncFd::register(fd) }.map_err(|e| io::Error::other(e.to_string()))
}

/// One fd message: its kinds and fds.
pub type FdMsg = (Vec<FdKind>, Vec<OwnedFd>);

/// The fd side channel (fd 4). Messages for a process other than the one
/// being created are kept until their CreateProcess asks for them.
pub struct FdChannel {
    sock: AsyncFd<OwnedFd>,
    pending: tokio::sync::Mutex<HashMap<(String, String), FdMsg>>,
}

impl FdChannel {
    pub fn new(sock: OwnedFd) -> io::Result<Self> {
        nonblocking(&sock)?;
        Ok(FdChannel {
            sock: register(sock)?,
            pending: Default::default(),
        })
    }

    pub async fn take(&self, container_id: &str, exec_id: &str) -> Result<FdMsg, String> {
        let key = (container_id.to_string(), exec_id.to_string());
        let mut pending = self.pending.lock().await;
        loop {
            if let Some(m) = pending.remove(&key) {
                return Ok(m);
            }
            let (h, fds) = self.recv().await.map_err(|e| e.to_string())?;
            let FdHeader {
                container_id,
                exec_id,
                fds: kinds,
            } = h;
            crate::debug!("fd message for {container_id}/{exec_id}: {kinds:?}");
            pending.insert((container_id, exec_id), (kinds, fds));
        }
    }

    async fn recv(&self) -> Result<(FdHeader, Vec<OwnedFd>), FdPassError> {
        loop {
            let mut guard = self.sock.readable().await.map_err(|e| {
                FdPassError::Io(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
            })?;
            let r = guard.try_io(|s| match fdpass::recv(s.get_ref().as_fd()) {
                Err(FdPassError::Io(Errno::EAGAIN)) => Err(io::ErrorKind::WouldBlock.into()),
                other => Ok(other),
            });
            if let Ok(Ok(r)) = r {
                return r;
            }
        }
    }
}

/// Reads the child's reports until it is ready (or failed). With
/// `expect_pid`, the intermediate's `Pid` report is awaited too.
/// Returns the pid that runs the workload when it differs from the forked one.
pub async fn await_ready(sock: &AsyncFd<OwnedFd>, expect_pid: bool) -> Result<Option<i32>, String> {
    let mut pid = None;
    let mut ready = false;
    while !ready || (expect_pid && pid.is_none()) {
        let msg = loop {
            let mut guard = sock.readable().await.map_err(|e| e.to_string())?;
            let r = guard.try_io(
                |s| match launch::recv_json::<ChildMsg>(s.get_ref().as_fd()) {
                    Err(SyncError::Io(Errno::EAGAIN)) => Err(io::ErrorKind::WouldBlock.into()),
                    other => Ok(other),
                },
            );
            if let Ok(Ok(r)) = r {
                break r;
            }
        };
        match msg {
            Ok(ChildMsg::Pid { pid: p }) => pid = Some(p),
            Ok(ChildMsg::Ready) => ready = true,
            Ok(ChildMsg::Error { message }) => return Err(message),
            Err(SyncError::Closed) => {
                return Err(
                    "the process died during set-up without reporting why (see the sandbox log)"
                        .into(),
                )
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(pid)
}
