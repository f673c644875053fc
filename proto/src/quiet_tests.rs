use super::*;
use std::io::Read;
use std::os::unix::net::UnixStream as StdStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EPOLLIN: u32 = 0x1;
const EPOLLOUT: u32 = 0x4;

/// The fds of this process open on the same socket as `fd`.
fn same_socket(fd: i32) -> Vec<i32> {
    let link = |n: &str| std::fs::read_link(format!("/proc/self/fd/{n}")).ok();
    let want = link(&fd.to_string()).unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|n| link(&n.to_string()).as_ref() == Some(&want))
        .collect()
}

/// The event masks the epoll instances of this process hold for `fd` (by fd
/// number and inode: tests in other threads reuse fd numbers), each once
/// (the runtime holds its epoll instance under two fds).
fn epoll_masks(fd: i32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .ino();
    let mut masks = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_epoll = std::fs::read_link(e.path())
            .map(|t| t.to_string_lossy() == "anon_inode:[eventpoll]")
            .unwrap_or(false);
        if !is_epoll {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{name}")).unwrap_or_default();
        for line in info.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (Some(tfd), Some(ev), Some(i)) = (
                field(&words, "tfd:"),
                field(&words, "events:"),
                words.iter().find_map(|w| w.strip_prefix("ino:")),
            ) else {
                continue;
            };
            if tfd.parse::<i32>() == Ok(fd) && u64::from_str_radix(i, 16) == Ok(ino) {
                masks.push(u32::from_str_radix(ev, 16).unwrap());
            }
        }
    }
    masks.sort_unstable();
    masks.dedup();
    masks
}

fn field<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    let at = words.iter().position(|w| *w == key)?;
    words.get(at + 1).copied()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap()
}

#[test]
fn only_reads_are_watched_where_tokio_watches_both() {
    rt().block_on(async {
        let (a, _peer) = StdStream::pair().unwrap();
        let q = Quiet::new(a.into()).unwrap();
        let masks = epoll_masks(q.as_fd().as_raw_fd());
        assert_eq!(masks.len(), 1, "{masks:x?}");
        assert_ne!(masks[0] & EPOLLIN, 0, "{:x}", masks[0]);
        assert_eq!(masks[0] & EPOLLOUT, 0, "{:x}", masks[0]);

        // What this replaces: the probe sees tokio's writability interest.
        let (b, _peer) = StdStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let t = tokio::net::UnixStream::from_std(b).unwrap();
        let masks = epoll_masks(t.as_fd().as_raw_fd());
        assert_eq!(masks.len(), 1, "{masks:x?}");
        assert_ne!(masks[0] & EPOLLOUT, 0, "{:x}", masks[0]);

        // Taken over from tokio: one registration, for reads.
        let q = Quiet::from_tokio(t).unwrap();
        let masks = epoll_masks(q.as_fd().as_raw_fd());
        assert_eq!(masks.len(), 1, "{masks:x?}");
        assert_eq!(masks[0] & EPOLLOUT, 0, "{:x}", masks[0]);
    });
}

#[test]
fn reads_what_comes_and_then_the_end() {
    rt().block_on(async {
        let (a, mut peer) = StdStream::pair().unwrap();
        let mut q = Quiet::new(a.into()).unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::io::Write::write_all(&mut peer, b"hello").unwrap();
        });
        let mut got = Vec::new();
        q.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
        writer.join().unwrap();
    });
}

#[test]
fn a_full_socket_waits_for_room_then_stops_watching_for_it() {
    rt().block_on(async {
        let (a, mut peer) = StdStream::pair().unwrap();
        let mut q = Quiet::new(a.into()).unwrap();
        let fd = q.as_fd().as_raw_fd();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let expect = data.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            // Let the writer fill the socket and wait first.
            rx.recv().unwrap();
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        let write = async {
            q.write_all(&data).await.unwrap();
            q.shutdown().await.unwrap();
        };
        tokio::pin!(write);
        // Runs the write until it waits for room.
        assert!(futures::poll!(write.as_mut()).is_pending());
        // A duplicate of the fd now waits for room.
        let fds = same_socket(fd);
        assert_eq!(fds.len(), 2, "{fds:?}");
        let dup = fds.into_iter().find(|&n| n != fd).unwrap();
        let masks = epoll_masks(dup);
        assert_eq!(masks.len(), 1, "{masks:x?}");
        assert_ne!(masks[0] & EPOLLOUT, 0, "{:x}", masks[0]);
        assert_eq!(epoll_masks(fd)[0] & EPOLLOUT, 0);
        tx.send(()).unwrap();
        write.await;
        assert!(q.write.is_none(), "room again: no longer watched");
        assert_eq!(same_socket(fd), vec![fd], "the duplicate is closed");
        assert!(
            reader.join().unwrap() == expect,
            "the bytes arrive whole and in order"
        );
    });
}

#[test]
fn a_vectored_write_is_one_send() {
    rt().block_on(async {
        let (a, mut peer) = StdStream::pair().unwrap();
        let mut q = Quiet::new(a.into()).unwrap();
        assert!(q.is_write_vectored());
        let n = q
            .write_vectored(&[IoSlice::new(b"head"), IoSlice::new(b"body")])
            .await
            .unwrap();
        assert_eq!(n, 8);
        let mut got = [0u8; 8];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"headbody");
    });
}

#[test]
fn a_gone_peer_is_an_error() {
    rt().block_on(async {
        let (a, peer) = StdStream::pair().unwrap();
        let mut q = Quiet::new(a.into()).unwrap();
        drop(peer);
        let e = q.write_all(b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
        let mut got = Vec::new();
        assert_eq!(q.read_to_end(&mut got).await.unwrap(), 0);
    });
}
