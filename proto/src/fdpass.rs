//! The fd side channel: a SOCK_SEQPACKET socketpair between shim and agent.
//! One message = a JSON [`FdHeader`] plus the fds it describes (SCM_RIGHTS).
//! The shim sends a batch right before the request that names its `seq`;
//! pairing by number (not by container id) means a batch can never be taken
//! by another request.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::cmsg_space;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

/// Largest header accepted; a bigger one is a protocol error.
pub const MAX_HEADER: usize = 64 * 1024;
/// The kernel refuses more than 253 fds in one SCM_RIGHTS message.
pub const MAX_FDS: usize = 253;

#[derive(Debug, thiserror::Error)]
pub enum FdPassError {
    #[error("fd side channel: {0}")]
    Io(#[from] nix::Error),
    #[error("fd side channel: bad header: {0}")]
    Header(#[from] serde_json::Error),
    #[error("fd side channel: header lists {listed} fds but {got} arrived")]
    Count { listed: usize, got: usize },
    #[error("fd side channel: too many fds ({0}, limit {MAX_FDS})")]
    TooMany(usize),
    #[error("fd side channel closed by the peer")]
    Closed,
    #[error("fd side channel: message truncated")]
    Truncated,
}

/// What one passed fd is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "arg")]
pub enum FdKind {
    Stdin,
    Stdout,
    Stderr,
    /// The pty slave; stdin, stdout and stderr all point at it.
    Console,
    /// A detached mount tree (open_tree) of the container's rootfs.
    Rootfs,
    /// A detached mount tree for `spec.mounts[i]`: exactly the mounts
    /// `rund_sys::mount::is_bind` calls bind mounts.
    Mount(usize),
    /// An nsfs fd to join: "net", "ipc", "uts", "pid" or "cgroup".
    Namespace(String),
    /// A device node to bind-mount at this container path (user namespaces).
    Device(String),
    /// A cgroup v2 directory to start the container init in
    /// (`clone3(CLONE_INTO_CGROUP)`).
    Cgroup,
    /// v1: a cgroup's `tasks` file, open for writing, one per hierarchy. The
    /// agent's forking thread writes "0" to each (moving itself, which takes
    /// no global lock) so the child is born in the cgroup.
    CgroupTasks,
    /// A new ttrpc connection from a restarted node shim, alone in its
    /// batch: served beside the old one, whose late answers then reach
    /// nobody instead of the new client.
    Conn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FdHeader {
    /// The batch number the request names (`fd_seq`); 0 is the launch batch.
    pub seq: u64,
    pub fds: Vec<FdKind>,
}

/// Sends `header` with `fds` (same order as `header.fds`).
pub fn send(
    sock: BorrowedFd<'_>,
    header: &FdHeader,
    fds: &[BorrowedFd<'_>],
) -> Result<(), FdPassError> {
    if fds.len() != header.fds.len() {
        return Err(FdPassError::Count {
            listed: header.fds.len(),
            got: fds.len(),
        });
    }
    send_msg(sock, header, fds)
}

/// Receives one batch. Every fd that arrives is owned (and so closed on
/// error), so a bad message leaks nothing.
pub fn recv(sock: BorrowedFd<'_>) -> Result<(FdHeader, Vec<OwnedFd>), FdPassError> {
    let (header, fds): (FdHeader, _) = recv_msg(sock)?;
    if header.fds.len() != fds.len() {
        return Err(FdPassError::Count {
            listed: header.fds.len(),
            got: fds.len(),
        });
    }
    Ok((header, fds))
}

/// Sends one JSON message with `fds` attached (SCM_RIGHTS), as one datagram.
pub fn send_msg<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), FdPassError> {
    if fds.len() > MAX_FDS {
        return Err(FdPassError::TooMany(fds.len()));
    }
    let body = serde_json::to_vec(msg)?;
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [IoSlice::new(&body)];
    let cmsgs = if raw.is_empty() {
        vec![]
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// Receives one JSON datagram and the fds attached to it.
pub fn recv_msg<T: for<'de> Deserialize<'de>>(
    sock: BorrowedFd<'_>,
) -> Result<(T, Vec<OwnedFd>), FdPassError> {
    let mut buf = vec![0u8; MAX_HEADER];
    let mut cmsg = cmsg_space!([RawFd; MAX_FDS]);
    let (len, fds, truncated) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(list) = c {
                for fd in list {
                    // SAFETY: the kernel just installed this fd for us; nobody else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        let truncated = msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
        (msg.bytes, fds, truncated)
    };
    if truncated {
        return Err(FdPassError::Truncated);
    }
    if len == 0 && fds.is_empty() {
        return Err(FdPassError::Closed);
    }
    Ok((serde_json::from_slice(&buf[..len])?, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    #[test]
    fn roundtrip_with_fds() {
        let (a, b) = pair();
        let f = std::fs::File::open("/dev/null").unwrap();
        let h = FdHeader {
            seq: 7,
            fds: vec![FdKind::Stdin, FdKind::Mount(3)],
        };
        send(a.as_fd(), &h, &[f.as_fd(), f.as_fd()]).unwrap();
        let (got, fds) = recv(b.as_fd()).unwrap();
        assert_eq!(got, h);
        assert_eq!(fds.len(), 2);
        assert_ne!(fds[0].as_raw_fd(), fds[1].as_raw_fd());
    }

    #[test]
    fn count_mismatch_is_refused_before_sending() {
        let (a, _b) = pair();
        let h = FdHeader {
            fds: vec![FdKind::Stdout],
            ..Default::default()
        };
        assert!(matches!(
            send(a.as_fd(), &h, &[]),
            Err(FdPassError::Count { .. })
        ));
    }

    #[test]
    fn closed_peer_is_reported() {
        let (a, b) = pair();
        drop(a);
        assert!(matches!(recv(b.as_fd()), Err(FdPassError::Closed)));
    }
}
