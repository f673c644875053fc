//! The fd side channel (`rund_proto::fdpass`): one JSON header plus
//! SCM_RIGHTS fds per datagram. The agent reads `FdHeader` batches from the
//! shim, and `ChildMsg` reports from the processes it forks. Bytes and fds
//! go through a real SOCK_SEQPACKET pair, as in rund.

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use rund_proto::fdpass::{recv, recv_msg, FdHeader, FdPassError, MAX_HEADER};

use crate::agent_sync::ChildMsg;

pub fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair")
}

struct Fixture {
    pair: (OwnedFd, OwnedFd),
    null: File,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture {
        pair: seqpacket_pair(),
        null: File::open("/dev/null").expect("/dev/null"),
    })
}

/// Open fds of this process: every fd a message brings must be closed
/// again whatever the outcome.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn roundtrip<T>(msg: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let again: T = serde_json::from_slice(&serde_json::to_vec(msg).expect("serialises"))
        .expect("its own JSON parses");
    assert_eq!(&again, msg);
}

pub fn run(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let f = fixture();
    let nfds = (sel & 3) as usize;
    let raw: Vec<RawFd> = vec![f.null.as_raw_fd(); nfds];
    let cmsgs = if nfds == 0 {
        vec![]
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    let before = open_fds();
    let iov = [IoSlice::new(body)];
    let sent = sendmsg::<()>(
        f.pair.0.as_raw_fd(),
        &iov,
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    );
    if sent.is_err() {
        return;
    }
    let sock = f.pair.1.as_fd();
    let outcome: Result<usize, FdPassError> = if sel & 4 == 0 {
        recv(sock).map(|(h, fds)| {
            assert_eq!(h.fds.len(), fds.len());
            roundtrip::<FdHeader>(&h);
            fds.len()
        })
    } else {
        recv_msg::<ChildMsg>(sock).map(|(m, fds)| {
            roundtrip(&m);
            fds.len()
        })
    };
    match outcome {
        Ok(n) => {
            assert_eq!(n, nfds, "fds lost or invented");
            assert!(body.len() <= MAX_HEADER, "a truncated header was accepted");
        }
        Err(FdPassError::Closed) => assert!(body.is_empty() && nfds == 0),
        Err(FdPassError::Truncated) => assert!(body.len() > MAX_HEADER),
        Err(FdPassError::Count { listed, got }) => assert!(listed != got && got == nfds),
        Err(FdPassError::Header(_)) => {}
        Err(e) => panic!("unexpected error {e}"),
    }
    assert_eq!(open_fds(), before, "a received fd leaked");
}
