use super::*;
use tokio::io::AsyncWriteExt;

/// Records each write the socket would see; takes at most `max` bytes per
/// write and answers every other call with Pending when `stutter`.
#[derive(Default)]
struct Sink {
    writes: Vec<Vec<u8>>,
    max: usize,
    stutter: bool,
    tick: bool,
    flushes: usize,
}

impl Sink {
    fn new(max: usize, stutter: bool) -> Sink {
        Sink {
            max,
            stutter,
            ..Default::default()
        }
    }

    fn all(&self) -> Vec<u8> {
        self.writes.concat()
    }

    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.stutter {
            return false;
        }
        self.tick = !self.tick;
        if self.tick {
            cx.waker().wake_by_ref();
        }
        self.tick
    }
}

impl AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(data)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let mut chunk = Vec::new();
        for b in bufs {
            let k = (self.max - chunk.len()).min(b.len());
            chunk.extend_from_slice(&b[..k]);
        }
        let n = chunk.len();
        self.writes.push(chunk);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flushes += 1;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn frame(stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(&[1, 0]);
    f.extend_from_slice(payload);
    f
}

/// What ttrpc 0.9's `GenMessage::write_to` does.
async fn write_like_ttrpc<W: AsyncWrite + Unpin>(w: &mut W, stream: u32, payload: &[u8]) {
    w.write_u32(payload.len() as u32).await.unwrap();
    w.write_u32(stream).await.unwrap();
    w.write_u8(1).await.unwrap();
    w.write_u8(0).await.unwrap();
    w.flush().await.unwrap();
    w.write_all(payload).await.unwrap();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn a_frame_is_one_write() {
    rt().block_on(async {
        let mut c = Coalesced::new(Sink::new(usize::MAX, false));
        write_like_ttrpc(&mut c, 3, b"hello").await;
        write_like_ttrpc(&mut c, 5, &[7u8; 300]).await;
        let sink = c.get_ref();
        assert_eq!(sink.writes, vec![frame(3, b"hello"), frame(5, &[7u8; 300])]);
    });
}

#[test]
fn an_empty_frame_goes_out_with_its_header() {
    rt().block_on(async {
        let mut c = Coalesced::new(Sink::new(usize::MAX, false));
        write_like_ttrpc(&mut c, 9, b"").await;
        assert_eq!(c.get_ref().writes, vec![frame(9, b"")]);
        write_like_ttrpc(&mut c, 11, b"x").await;
        assert_eq!(c.get_ref().writes, vec![frame(9, b""), frame(11, b"x")]);
    });
}

#[test]
fn short_and_pending_writes_keep_every_byte_in_order() {
    for max in [1, 3, 7, 10, 11, 64] {
        rt().block_on(async {
            let mut c = Coalesced::new(Sink::new(max, true));
            let mut want = Vec::new();
            for (i, len) in [0usize, 5, 0, 200, 1, 37].into_iter().enumerate() {
                let payload: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
                write_like_ttrpc(&mut c, i as u32 * 2 + 1, &payload).await;
                want.extend(frame(i as u32 * 2 + 1, &payload));
            }
            c.flush().await.unwrap();
            assert_eq!(c.get_ref().all(), want, "max {max}");
        });
    }
}

#[test]
fn a_payload_longer_than_one_write_passes_through() {
    rt().block_on(async {
        let mut c = Coalesced::new(Sink::new(usize::MAX, false));
        // A caller that writes one frame's payload in pieces, and the next
        // frame's header in the same buffer as the end of it.
        let mut bytes = frame(1, b"abcdef");
        bytes.extend(frame(3, b"gh"));
        c.write_all(&bytes[..12]).await.unwrap();
        c.write_all(&bytes[12..]).await.unwrap();
        assert_eq!(c.get_ref().all(), bytes);
        assert_eq!(c.get_ref().writes[0], bytes[..12].to_vec());
    });
}

#[test]
fn shutdown_sends_a_held_header() {
    rt().block_on(async {
        let mut c = Coalesced::new(Sink::new(usize::MAX, false));
        c.write_u32(4).await.unwrap();
        c.write_u32(1).await.unwrap();
        c.write_u16(0x0100).await.unwrap();
        c.flush().await.unwrap();
        assert!(c.get_ref().writes.is_empty(), "held for its payload");
        c.shutdown().await.unwrap();
        assert_eq!(c.get_ref().all(), vec![0, 0, 0, 4, 0, 0, 0, 1, 1, 0]);
    });
}

/// The real ttrpc client over a SOCK_SEQPACKET pair, where each write is
/// one record: a request comes as one record of header and payload.
#[test]
fn ttrpc_sends_a_request_as_one_write() {
    use nix::sys::socket::{recv, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let record = rt.block_on(async {
        let std_a = std::os::unix::net::UnixStream::from(a);
        let client = ttrpc::r#async::Client::new(socket(std_a).unwrap());
        let req = ttrpc::proto::Request {
            service: "rund.Test".into(),
            method: "Ping".into(),
            payload: vec![7; 100],
            ..Default::default()
        };
        // Never answered: only what reaches the socket matters.
        let call = tokio::spawn(async move { client.request(req).await });
        let reader = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; 65536];
            let n = recv(b.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
            buf.truncate(n);
            buf
        });
        let record = reader.await.unwrap();
        call.abort();
        record
    });
    assert!(record.len() > HEADER, "a record of {} bytes", record.len());
    let len = u32::from_be_bytes(record[..4].try_into().unwrap()) as usize;
    assert_eq!(
        record.len(),
        HEADER + len,
        "header and payload in one write"
    );
}

#[test]
fn an_empty_frame_is_taken_only_once_it_is_out() {
    for max in [1, 3, 9, 10] {
        rt().block_on(async {
            let mut c = Coalesced::new(Sink::new(max, true));
            // The header in one buffer, no flush: once write_all returns,
            // every byte of it must be on the socket.
            c.write_all(&frame(5, b"")).await.unwrap();
            assert_eq!(c.get_ref().all(), frame(5, b""), "max {max}");
            c.write_all(&frame(7, b"")).await.unwrap();
            let mut want = frame(5, b"");
            want.extend(frame(7, b""));
            assert_eq!(c.get_ref().all(), want, "max {max}");
        });
    }
}

#[test]
fn connect_takes_a_path_a_unix_url_and_an_abstract_name() {
    use std::os::linux::net::SocketAddrExt;
    let dir = std::env::temp_dir().join(format!("rund-coalesce-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let by_path = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let name = format!("rund-coalesce-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let by_name = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let p = path.display().to_string();
        for address in [p.clone(), format!("unix://{p}")] {
            connect(&address).unwrap();
            by_path.accept().unwrap();
        }
        connect(&format!("@{name}")).unwrap();
        by_name.accept().unwrap();
        match connect(&dir.join("none.sock").display().to_string()) {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound),
            Ok(_) => panic!("connected to a socket that is not there"),
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
