//! stdin: the container reads a pipe; the shim copies containerd's stdin
//! FIFO into it and closes the pipe on EOF or CloseIO.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::{AdoptedIo, IoError, IoRole, KeepGuard, KeepIo};

pub struct StdinFeeder {
    close: Arc<Notify>,
}

impl StdinFeeder {
    /// Creates the pipe and starts the copier; returns the read end to pass.
    pub fn new(fifo: &str, keep: Option<&KeepIo>) -> Result<(StdinFeeder, OwnedFd), IoError> {
        let path = super::strip_scheme("stdin", fifo)?.to_string();
        let (read_end, write_end) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| IoError::Open {
                what: "stdin pipe",
                path: path.clone(),
                source: e.into(),
            })?;
        let reader = open_fifo(&path)?;
        let guards = [
            super::kept(keep, IoRole::StdinFifo, reader.as_fd()),
            super::kept(keep, IoRole::StdinPipe, write_end.as_fd()),
        ];
        Ok((Self::feed(reader, write_end, guards), read_end))
    }

    /// Copies on where a dead node shim stopped, with the fds its keeper held.
    pub fn adopt(io: &mut AdoptedIo) -> Option<StdinFeeder> {
        let (fifo, fifo_kept) = io.remove(&IoRole::StdinFifo)?;
        let (pipe, pipe_kept) = io.remove(&IoRole::StdinPipe)?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(fifo)
            .inspect_err(|e| tracing::warn!("adopting a stdin FIFO: {e}"))
            .ok()?;
        Some(Self::feed(reader, pipe, [Some(fifo_kept), Some(pipe_kept)]))
    }

    /// The copier. The keeper's copies go with it: kept on, the pipe would
    /// never give the container EOF.
    fn feed(
        mut reader: tokio::net::unix::pipe::Receiver,
        write_end: OwnedFd,
        guards: [Option<KeepGuard>; 2],
    ) -> StdinFeeder {
        let close = Arc::new(Notify::new());
        let closed = close.clone();
        tokio::spawn(async move {
            let _guards = guards;
            let writer = tokio::net::unix::pipe::Sender::from_owned_fd(write_end);
            let Ok(mut writer) = writer else { return };
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                tokio::select! {
                    n = reader.read(&mut buf) => match n {
                        Ok(0) | Err(_) => break,
                        Ok(n) => if writer.write_all(&buf[..n]).await.is_err() { break },
                    },
                    _ = closed.notified() => {
                        // CloseIO can overtake bytes still in the FIFO:
                        // deliver what is there, then EOF.
                        while let Ok(n) = reader.try_read(&mut buf) {
                            if n == 0 || writer.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        break;
                    }
                }
            }
            // Dropping the writer gives the container EOF.
        });
        StdinFeeder { close }
    }

    /// CloseIO: the container sees EOF on stdin.
    pub fn close(&self) {
        self.close.notify_one();
    }
}

impl Drop for StdinFeeder {
    fn drop(&mut self) {
        self.close.notify_one();
    }
}

/// Opens containerd's stdin FIFO for reading, at once: `O_NONBLOCK` makes
/// the open return without a writer, and epoll reports nothing on a FIFO
/// that never had one, so the copier waits for data, or for the writer's
/// close (EOF). No thread ever waits in open(2): one that did stayed there
/// for good once the client removed the FIFO without opening it (ctr with
/// nothing on its stdin), and a per-node shim piled them up pod after pod.
pub(super) fn open_fifo(path: &str) -> Result<tokio::net::unix::pipe::Receiver, IoError> {
    tokio::net::unix::pipe::OpenOptions::new()
        .open_receiver(path)
        .map_err(|source| IoError::Open {
            what: "stdin",
            path: path.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_fifo_opens_at_once_and_waits_for_its_writer() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stdin");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let mut rx = super::open_fifo(p.to_str().unwrap()).unwrap();
        let mut buf = [0u8; 16];
        // No writer yet: neither data nor EOF.
        let early = tokio::time::timeout(Duration::from_millis(300), rx.read(&mut buf)).await;
        assert!(early.is_err(), "read returned {early:?} before any writer");
        let mut w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        w.write_all(b"hi").unwrap();
        drop(w);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hi");
        assert!(super::open_fifo("/nonexistent/stdin").is_err());
    }
}
