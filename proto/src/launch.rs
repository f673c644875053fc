//! The launch handshake between the shim and `rund-agent launch`.
//!
//! The shim starts `rund-agent launch` with three inherited fds:
//! - fd 3 ([`CONN_FD`]): the agent's end of a connected unix stream
//!   socketpair; the agent serves ttrpc on it and on nothing else;
//! - fd 4 ([`FDPASS_FD`]): the fd side channel (SOCK_SEQPACKET, see `fdpass`);
//! - fd 5 ([`SYNC_FD`]): this handshake (SOCK_SEQPACKET), closed once the agent runs.
//!
//! On fd 5, in order:
//! 1. shim -> launcher: an `fdpass` batch with seq 0 carrying the namespaces
//!    to join (`FdKind::Namespace`), then one [`LaunchConfig`] JSON message.
//! 2. The launcher, still in the initial user namespace, joins the namespace
//!    fds and writes the pod sysctls that belong to joined namespaces.
//! 3. If `userns`: it unshares CLONE_NEWUSER and sends [`SyncMsg::UsernsReady`]
//!    with its pid; the shim writes uid_map/gid_map and answers [`SyncMsg::MapsWritten`];
//!    the launcher then becomes root inside (setresgid/setgroups/setresuid 0).
//! 4. It unshares mount, pid (unless `host_pid`) and the `new_*` namespaces,
//!    forks the agent, sends [`SyncMsg::AgentPid`] and exits 0.
//! 5. Any failure is sent as [`SyncMsg::Error`] and the launcher exits 1.
//!    After the agent is serving, it sends [`SyncMsg::Ready`] on fd 5 and closes it.

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::socket::{recv, send, MsgFlags};
use serde::{Deserialize, Serialize};

pub const CONN_FD: i32 = 3;
pub const FDPASS_FD: i32 = 4;
pub const SYNC_FD: i32 = 5;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchConfig {
    pub sandbox_id: String,
    /// Enter a new user namespace (the shim writes the maps).
    pub userns: bool,
    pub new_net: bool,
    pub new_ipc: bool,
    pub new_uts: bool,
    /// Stay in the host pid namespace (hostPID pods): the agent is then not
    /// an init, only a subreaper of what it starts.
    pub host_pid: bool,
    pub hostname: Option<String>,
    /// Pod-level sysctls (already validated), written in the pod's namespaces.
    pub sysctls: Vec<(String, String)>,
    pub debug: bool,
    /// Unmap the agent's clean file pages after this long with no process
    /// started or deleted (`rund_sys::trim`); 0: never.
    #[serde(default)]
    pub trim_after_ms: u64,
    /// A warm agent: launched before any pod, claimed later by one
    /// (`ClaimSandbox`), which then joins or makes its network namespace.
    #[serde(default)]
    pub warm: bool,
    /// Where the node's agent-root template is pinned (an nsfs bind, made
    /// on first use). A launch with no user namespace and no sysctls enters
    /// it before its unshare, so the agent copies a few mounts instead of
    /// the host's table and needs no pivot_root. None: the agent builds its
    /// own root.
    #[serde(default)]
    pub root_template: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "msg")]
pub enum SyncMsg {
    UsernsReady { pid: i32 },
    MapsWritten,
    AgentPid { pid: i32 },
    Ready,
    Error { message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("launch handshake: {0}")]
    Io(#[from] nix::Error),
    #[error("launch handshake: bad message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("launch handshake: peer closed the channel")]
    Closed,
    #[error("launch handshake: a {0}-byte message is over the limit")]
    TooLong(usize),
}

/// Sends one JSON message as a single datagram.
pub fn send_json<T: Serialize>(sock: BorrowedFd<'_>, msg: &T) -> Result<(), SyncError> {
    let body = serde_json::to_vec(msg)?;
    send(sock.as_raw_fd(), &body, MsgFlags::MSG_NOSIGNAL)?;
    Ok(())
}

/// Receives one JSON datagram.
pub fn recv_json<T: for<'de> Deserialize<'de>>(sock: BorrowedFd<'_>) -> Result<T, SyncError> {
    let mut buf = vec![0u8; crate::fdpass::MAX_HEADER];
    // MSG_TRUNC returns the datagram's real length: a message cut short is
    // refused, never read in part.
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_TRUNC)?;
    if n == 0 {
        return Err(SyncError::Closed);
    }
    if n > buf.len() {
        return Err(SyncError::TooLong(n));
    }
    Ok(serde_json::from_slice(&buf[..n])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    #[test]
    fn sync_messages_roundtrip() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        send_json(a.as_fd(), &SyncMsg::AgentPid { pid: 42 }).unwrap();
        let m: SyncMsg = recv_json(b.as_fd()).unwrap();
        assert_eq!(m, SyncMsg::AgentPid { pid: 42 });
        drop(a);
        assert!(matches!(
            recv_json::<SyncMsg>(b.as_fd()),
            Err(SyncError::Closed)
        ));
    }

    /// A message over the limit is refused whole, even when the part that
    /// fits would parse.
    #[test]
    fn oversized_message_is_refused() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let mut body = br#"{"msg":"ready"}"#.to_vec();
        body.resize(crate::fdpass::MAX_HEADER + 1, b' ');
        send(a.as_raw_fd(), &body, MsgFlags::empty()).unwrap();
        let e = recv_json::<SyncMsg>(b.as_fd()).unwrap_err();
        assert!(matches!(e, SyncError::TooLong(n) if n == body.len()), "{e}");
    }
}
