//! The launch handshake (`rund_proto::launch`): `LaunchConfig` from the
//! shim and `SyncMsg` from the launcher, each one JSON datagram.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::OnceLock;

use nix::sys::socket::{send, MsgFlags};
use rund_proto::fdpass::MAX_HEADER;
use rund_proto::launch::{recv_json, LaunchConfig, SyncError, SyncMsg};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::fdpass::seqpacket_pair;

fn pair() -> &'static (OwnedFd, OwnedFd) {
    static PAIR: OnceLock<(OwnedFd, OwnedFd)> = OnceLock::new();
    PAIR.get_or_init(seqpacket_pair)
}

fn check<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(body: &[u8]) {
    let (a, b) = pair();
    if send(a.as_raw_fd(), body, MsgFlags::MSG_NOSIGNAL).is_err() {
        return;
    }
    match recv_json::<T>(b.as_fd()) {
        Ok(msg) => {
            assert!(!body.is_empty());
            // Only a message read whole is a message.
            assert!(body.len() <= MAX_HEADER, "{} bytes accepted", body.len());
            let again: T = serde_json::from_slice(&serde_json::to_vec(&msg).expect("serialises"))
                .expect("its own JSON parses");
            assert_eq!(again, msg);
        }
        Err(SyncError::Closed) => assert!(body.is_empty(), "data read as a close"),
        Err(_) => {}
    }
}

pub fn run(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        check::<LaunchConfig>(body);
    } else {
        check::<SyncMsg>(body);
    }
}
