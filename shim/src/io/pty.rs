//! Terminal mode: a pty from the host's devpts. The slave becomes the
//! container's stdin/stdout/stderr and controlling terminal; the shim copies
//! between the master and containerd's FIFOs.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use nix::pty::{openpty, Winsize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::{IoError, Stdio};

pub struct Pty {
    master: Arc<OwnedFd>,
    slave: Mutex<Option<OwnedFd>>,
    /// Notified when all output has been copied (master hit EOF/EIO).
    pub output_done: Arc<Notify>,
    done_flag: Arc<std::sync::atomic::AtomicBool>,
    stdin_close: Arc<Notify>,
}

impl Pty {
    pub async fn open(paths: &Stdio) -> Result<Pty, IoError> {
        let pair = openpty(None, None).map_err(|e| IoError::Pty(format!("openpty: {e}")))?;
        set_cloexec(&pair.master)?;
        set_cloexec(&pair.slave)?;
        let master = Arc::new(pair.master);
        let output_done = Arc::new(Notify::new());
        let done_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stdin_close = Arc::new(Notify::new());
        if let Some(out) = super::open_output("stdout", &paths.stdout).await? {
            spawn_output(master.clone(), out, output_done.clone(), done_flag.clone())?;
        } else {
            done_flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if !paths.stdin.is_empty() {
            spawn_input(master.clone(), paths.stdin.clone(), stdin_close.clone())?;
        }
        Ok(Pty {
            master,
            slave: Mutex::new(Some(pair.slave)),
            output_done,
            done_flag,
            stdin_close,
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

fn spawn_output(
    master: Arc<OwnedFd>,
    out: std::fs::File,
    done: Arc<Notify>,
    flag: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), IoError> {
    let fd = super::async_fd(dup_nonblocking(&master)?).map_err(|e| IoError::Pty(e.to_string()))?;
    let mut out = tokio::fs::File::from_std(out);
    tokio::spawn(async move {
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
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        done.notify_waiters();
    });
    Ok(())
}

fn spawn_input(master: Arc<OwnedFd>, stdin: String, close: Arc<Notify>) -> Result<(), IoError> {
    let path = super::strip_scheme("stdin", &stdin)?.to_string();
    let writer = dup_nonblocking(&master)?;
    let mut reader = super::stdin::open_fifo(&path)?;
    tokio::spawn(async move {
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
