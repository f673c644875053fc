//! Long polls in flight on a kept containerd connection. containerd keeps a
//! Wait (and, with the sandbox API, a WaitSandbox) open for every running
//! task; a node shim that dies has read those requests and answers none. The
//! frames of these requests go to the keeper as they arrive and are let go
//! once answered, so the next node shim reads them again first and answers
//! them under their own stream ids. Other requests in flight at a crash are
//! not replayed, since redoing a Create or a Kill is not safe: their stream
//! ids go to the keeper too, and the next node shim answers each with
//! UNAVAILABLE ([`unanswered`]) instead of leaving its caller waiting.
//!
//! ttrpc frame: a 10-byte header (payload length u32 BE, stream id u32 BE,
//! type u8, flags u8), then the payload.

use containerd_shim_protos::protobuf::Message;

/// The methods whose requests are replayed.
pub const REPLAYED: [&str; 2] = ["Wait", "WaitSandbox"];

const HEADER: usize = 10;
pub const TYPE_REQUEST: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;
/// A Wait request is about a hundred bytes; bigger ones are not kept.
const MAX_KEPT: usize = 64 << 10;

/// What a stream of frames showed.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// A request to replay: its stream id and whole frame.
    Request {
        stream: u32,
        frame: Vec<u8>,
    },
    /// Any other request.
    Other {
        stream: u32,
    },
    Response {
        stream: u32,
    },
}

/// Follows the frames of one direction of a connection.
#[derive(Default)]
pub struct Frames {
    head: Vec<u8>,
    body: Vec<u8>,
    left: usize,
}

impl Frames {
    /// Feeds the next bytes; returns what completed in them.
    pub fn feed(&mut self, mut buf: &[u8]) -> Vec<Seen> {
        let mut seen = Vec::new();
        while !buf.is_empty() {
            if self.head.len() < HEADER {
                let n = (HEADER - self.head.len()).min(buf.len());
                self.head.extend_from_slice(&buf[..n]);
                buf = &buf[n..];
                if self.head.len() == HEADER {
                    self.left = u32::from_be_bytes(self.head[0..4].try_into().unwrap()) as usize;
                    self.body.clear();
                    if self.left == 0 {
                        seen.extend(self.done());
                    }
                }
                continue;
            }
            let n = self.left.min(buf.len());
            if self.keeps() {
                self.body.extend_from_slice(&buf[..n]);
            }
            self.left -= n;
            buf = &buf[n..];
            if self.left == 0 {
                seen.extend(self.done());
            }
        }
        seen
    }

    fn keeps(&self) -> bool {
        let len = u32::from_be_bytes(self.head[0..4].try_into().unwrap()) as usize;
        self.head[8] == TYPE_REQUEST && len <= MAX_KEPT
    }

    fn done(&mut self) -> Option<Seen> {
        let stream = u32::from_be_bytes(self.head[4..8].try_into().unwrap());
        let ty = self.head[8];
        let keeps = self.keeps();
        let head = std::mem::take(&mut self.head);
        let body = std::mem::take(&mut self.body);
        match ty {
            TYPE_RESPONSE => Some(Seen::Response { stream }),
            TYPE_REQUEST if keeps && replayed(&body) => {
                let mut frame = head;
                frame.extend_from_slice(&body);
                Some(Seen::Request { stream, frame })
            }
            TYPE_REQUEST => Some(Seen::Other { stream }),
            _ => None,
        }
    }
}

/// The answer to a request a dead node shim read and never answered: its
/// effect is unknown, so it is not redone.
pub fn unanswered(stream: u32) -> Vec<u8> {
    let status = containerd_shim_protos::ttrpc::get_status(
        containerd_shim_protos::ttrpc::Code::UNAVAILABLE,
        "rund's node shim died while serving this request and was restarted; \
         the request may have been carried out in part",
    );
    let response = containerd_shim_protos::ttrpc::Response {
        status: Some(status).into(),
        ..Default::default()
    };
    frame(
        stream,
        TYPE_RESPONSE,
        &response.write_to_bytes().unwrap_or_default(),
    )
}

/// A whole ttrpc frame of type `ty` under `stream`.
pub fn frame(stream: u32, ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(&[ty, 0]);
    f.extend_from_slice(payload);
    f
}

fn replayed(payload: &[u8]) -> bool {
    containerd_shim_protos::ttrpc::Request::parse_from_bytes(payload)
        .is_ok_and(|r| REPLAYED.contains(&r.method.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str) -> Vec<u8> {
        let r = containerd_shim_protos::ttrpc::Request {
            service: "containerd.task.v2.Task".into(),
            method: method.into(),
            payload: vec![10, 1, b'c'],
            ..Default::default()
        };
        r.write_to_bytes().unwrap()
    }

    #[test]
    fn waits_are_seen_whole_in_any_chunking_and_others_by_stream() {
        let wait = frame(3, TYPE_REQUEST, &request("Wait"));
        let state = frame(5, TYPE_REQUEST, &request("State"));
        let answer = frame(3, TYPE_RESPONSE, b"xyz");
        let all: Vec<u8> = [state.clone(), wait.clone(), answer].concat();
        for chunk in [1, 3, 10, 11, all.len()] {
            let mut f = Frames::default();
            let seen: Vec<Seen> = all.chunks(chunk).flat_map(|c| f.feed(c)).collect();
            assert_eq!(
                seen,
                vec![
                    Seen::Other { stream: 5 },
                    Seen::Request {
                        stream: 3,
                        frame: wait.clone()
                    },
                    Seen::Response { stream: 3 }
                ],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn an_empty_payload_frame_completes_at_its_header() {
        let mut f = Frames::default();
        assert_eq!(
            f.feed(&frame(9, TYPE_RESPONSE, b"")),
            vec![Seen::Response { stream: 9 }]
        );
        assert_eq!(
            f.feed(&frame(11, TYPE_REQUEST, b"not protobuf \xff")),
            vec![Seen::Other { stream: 11 }]
        );
    }

    #[test]
    fn the_unanswered_are_told_unavailable_under_their_stream() {
        let mut f = Frames::default();
        let reply = unanswered(7);
        assert_eq!(f.feed(&reply), vec![Seen::Response { stream: 7 }]);
        let r =
            containerd_shim_protos::ttrpc::Response::parse_from_bytes(&reply[HEADER..]).unwrap();
        assert_eq!(
            r.status.code.enum_value(),
            Ok(containerd_shim_protos::ttrpc::Code::UNAVAILABLE)
        );
        assert!(r.status.message.contains("node shim died"), "{r:?}");
    }
}
