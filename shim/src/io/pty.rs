//! Terminal mode: a pty from the host's devpts. The slave becomes the
//! container's stdin/stdout/stderr and controlling terminal; the shim copies
//! between the master and containerd's FIFOs.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use nix::pty::{openpty, Winsize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::{AdoptedIo, IoError, IoRole, KeepGuard, KeepIo, Stdio};

pub struct Pty {
    master: Arc<OwnedFd>,
    slave: Mutex<Option<OwnedFd>>,
    /// Notified when all output has been copied (master hit EOF/EIO).
    pub output_done: Arc<Notify>,
    done_flag: Arc<std::sync::atomic::AtomicBool>,
    stdin_close: Arc<Notify>,
    /// The keeper's copy of the master (per-node mode).
    _kept: Option<KeepGuard>,
}

impl Pty {
    pub async fn open(paths: &Stdio, keep: Option<&KeepIo>) -> Result<Pty, IoError> {
        let pair = openpty(None, None).map_err(|e| IoError::Pty(format!("openpty: {e}")))?;
        set_cloexec(&pair.master)?;
        set_cloexec(&pair.slave)?;
        let kept = super::kept(keep, IoRole::PtyMaster, pair.master.as_fd());
        let out = match super::open_output("stdout", &paths.stdout).await? {
            Some(f) => {
                let g = super::kept(keep, IoRole::PtyOut, f.as_fd());
                Some((f, g))
            }
            None => None,
        };
        let input = if paths.stdin.is_empty() {
            None
        } else {
            let path = super::strip_scheme("stdin", &paths.stdin)?;
            let reader = super::stdin::open_fifo(path)?;
            let g = super::kept(keep, IoRole::StdinFifo, reader.as_fd());
            Some((reader, g))
        };
        Self::serve(pair.master, Some(pair.slave), kept, out, input)
    }

    /// Copies on where a dead node shim stopped, with the fds its keeper
    /// held; `None` without a master.
    pub fn adopt(io: &mut AdoptedIo) -> Option<Pty> {
        let (master, kept) = io.remove(&IoRole::PtyMaster)?;
        let out = io
            .remove(&IoRole::PtyOut)
            .map(|(fd, g)| (std::fs::File::from(fd), Some(g)));
        let input = io.remove(&IoRole::StdinFifo).and_then(|(fd, g)| {
            let r = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                .inspect_err(|e| tracing::warn!("adopting a tty's stdin FIFO: {e}"))
                .ok()?;
            Some((r, Some(g)))
        });
        Self::serve(master, None, Some(kept), out, input)
            .inspect_err(|e| tracing::warn!("adopting a pty: {e}"))
            .ok()
    }

    fn serve(
        master: OwnedFd,
        slave: Option<OwnedFd>,
        kept: Option<KeepGuard>,
        out: Option<(std::fs::File, Option<KeepGuard>)>,
        input: Option<(tokio::net::unix::pipe::Receiver, Option<KeepGuard>)>,
    ) -> Result<Pty, IoError> {
        let master = Arc::new(master);
        let output_done = Arc::new(Notify::new());
        let done_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stdin_close = Arc::new(Notify::new());
        if let Some((out, g)) = out {
            spawn_output(
                master.clone(),
                out,
                output_done.clone(),
                done_flag.clone(),
                g,
            )?;
        } else {
            done_flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if let Some((reader, g)) = input {
            spawn_input(master.clone(), reader, stdin_close.clone(), g)?;
        }
        Ok(Pty {
            master,
            slave: Mutex::new(slave),
            output_done,
            done_flag,
            stdin_close,
            _kept: kept,
        })
    }

    pub fn take_slave(&self) -> Result<OwnedFd, IoError> {
        self.slave
            .lock()
            .expect("pty lock")
            .take()
            .ok_or_else(|| IoError::Pty("slave already handed out".into()))
    }

    pub fn resize(&self, width: u32, height: u32) -> Result<(), IoError> {
        let ws = Winsize {
            ws_row: height as u16,
            ws_col: width as u16,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a Winsize from the pointer we pass.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        if rc < 0 {
            return Err(IoError::Pty(format!(
                "resize: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    pub fn close_stdin(&self) {
        self.stdin_close.notify_one();
    }

    /// Waits (bounded by the caller) until all output reached the FIFO.
    pub async fn wait_output(&self) {
        let notified = self.output_done.notified();
        if self.done_flag.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        notified.await;
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        self.stdin_close.notify_one();
    }
}

fn set_cloexec(fd: &OwnedFd) -> Result<(), IoError> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| IoError::Pty(format!("cloexec: {e}")))?;
    Ok(())
}

fn dup_nonblocking(fd: &OwnedFd) -> Result<OwnedFd, IoError> {
    let dup = fd
        .try_clone()
        .map_err(|e| IoError::Pty(format!("dup master: {e}")))?;
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = fcntl(&dup, FcntlArg::F_GETFL).map_err(|e| IoError::Pty(e.to_string()))?;
    fcntl(
        &dup,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(fl) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| IoError::Pty(e.to_string()))?;
    Ok(dup)
}

/// Copies the master to the stdout FIFO. The keeper's copy of the FIFO goes
/// with the copier: kept on, containerd would never see the output end.
fn spawn_output(
    master: Arc<OwnedFd>,
    out: std::fs::File,
    done: Arc<Notify>,
    flag: Arc<std::sync::atomic::AtomicBool>,
    kept: Option<KeepGuard>,
) -> Result<(), IoError> {
    let fd = super::async_fd(dup_nonblocking(&master)?).map_err(|e| IoError::Pty(e.to_string()))?;
    let mut out = tokio::fs::File::from_std(out);
    tokio::spawn(async move {
        let kept = kept;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let Ok(mut guard) = fd.readable().await else {
                break;
            };
            let r = guard.try_io(|inner| {
                nix::unistd::read(inner.get_ref(), &mut buf).map_err(std::io::Error::from)
            });
            match r {
                Ok(Ok(0)) | Ok(Err(_)) => break, // EIO once the slave side is gone
                Ok(Ok(n)) => {
                    if out.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                Err(_would_block) => continue,
            }
        }
        let _ = out.flush().await;
        drop(out);
        drop(kept);
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        done.notify_waiters();
    });
    Ok(())
}

fn spawn_input(
    master: Arc<OwnedFd>,
    mut reader: tokio::net::unix::pipe::Receiver,
    close: Arc<Notify>,
    kept: Option<KeepGuard>,
) -> Result<(), IoError> {
    let writer = dup_nonblocking(&master)?;
    tokio::spawn(async move {
        let _kept = kept;
        let Ok(writer) = super::async_fd(writer) else {
            return;
        };
        let mut buf = vec![0u8; 4096];
        loop {
            let n = tokio::select! {
                n = reader.read(&mut buf) => match n { Ok(0) | Err(_) => break, Ok(n) => n },
                _ = close.notified() => break,
            };
            let mut off = 0;
            while off < n {
                let Ok(mut g) = writer.writable().await else {
                    return;
                };
                match g.try_io(|w| {
                    nix::unistd::write(w.get_ref(), &buf[off..n]).map_err(std::io::Error::from)
                }) {
                    Ok(Ok(w)) => off += w,
                    Ok(Err(_)) => return,
                    Err(_) => continue,
                }
            }
        }
    });
    Ok(())
}
