//! stdin: the container reads a pipe; the shim copies containerd's stdin
//! FIFO into it and closes the pipe on EOF or CloseIO.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::IoError;

pub struct StdinFeeder {
    close: Arc<Notify>,
}

impl StdinFeeder {
    /// Creates the pipe and starts the copier; returns the read end to pass.
    pub fn new(fifo: &str) -> Result<(StdinFeeder, OwnedFd), IoError> {
        let path = super::strip_scheme("stdin", fifo)?.to_string();
        let (read_end, write_end) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| IoError::Open {
                what: "stdin pipe",
                path: path.clone(),
                source: e.into(),
            })?;
        let close = Arc::new(Notify::new());
        let closed = close.clone();
        tokio::spawn(async move {
            let writer = tokio::net::unix::pipe::Sender::from_owned_fd(write_end);
            let Ok(mut writer) = writer else { return };
            // Opening a FIFO for reading waits for a writer; containerd opens
            // its end right after Create, so this rendezvous is short.
            let open_path = path.clone();
            let open = tokio::task::spawn_blocking(move || std::fs::File::open(&open_path));
            let file = tokio::select! {
                r = open => match r { Ok(Ok(f)) => f, _ => return },
                _ = closed.notified() => {
                    unblock_open(&path);
                    return;
                }
            };
            let Ok(mut reader) = tokio::net::unix::pipe::Receiver::from_file(file) else {
                return;
            };
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
        Ok((StdinFeeder { close }, read_end))
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

/// Wakes a blocked open-for-read of `path` by briefly opening the write side.
pub(super) fn unblock_open(path: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
}
