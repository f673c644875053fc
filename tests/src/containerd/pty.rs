//! ctr under a pseudo-terminal, for `ctr run -t` / `ctr task exec -t` (they need a terminal on
//! stdin). ctr is the session leader with the pty as controlling terminal, so a size change on
//! the master sends it SIGWINCH, as a real terminal would, and ctr forwards it (ResizePty).

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::pty::{openpty, Winsize};

use super::ctr::strs;
use super::Containerd;
use crate::error::{Error, IoContext, Result};

nix::ioctl_write_ptr_bad!(set_winsize, libc::TIOCSWINSZ, Winsize);

/// A ctr process whose stdin, stdout and stderr are a pty slave; we hold the master.
pub struct PtyCtr {
    child: Child,
    master: OwnedFd,
    out: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    cmd: String,
}

impl std::fmt::Debug for PtyCtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PtyCtr({}; output {:?})", self.cmd, self.output())
    }
}

fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn io_err(what: &'static str, e: nix::Error) -> Error {
    Error::Io {
        what,
        path: "/dev/ptmx".into(),
        source: std::io::Error::from(e),
    }
}

impl Containerd {
    /// Spawn `ctr <args>` in the instance namespace on a new pty of `rows` x `cols`.
    pub fn ctr_pty(&self, args: &[&str], rows: u16, cols: u16) -> Result<PtyCtr> {
        let ws = winsize(rows, cols);
        let pty = openpty(Some(&ws), None).map_err(|e| io_err("openpty", e))?;
        let mut c = self.ctr_command(&self.namespace);
        c.args(strs(args));
        let slave = pty.slave;
        let dup = |what| slave.try_clone().ctx(what, "/dev/pts");
        c.stdin(Stdio::from(dup("dup pty slave")?))
            .stdout(Stdio::from(dup("dup pty slave")?))
            .stderr(Stdio::from(dup("dup pty slave")?));
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, ioctl) are made.
        unsafe {
            c.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let printable = format!("{c:?}");
        let child = c.spawn().ctx("spawn ctr on a pty", self.ctr_path())?;
        // Only ctr may hold the slave: the reader sees EIO once ctr (and its children) exit.
        drop(c);
        drop(slave);
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut reader_fd =
            std::fs::File::from(pty.master.try_clone().ctx("dup pty master", "/dev/ptmx")?);
        let sink = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader_fd.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("pty output lock")
                    .extend_from_slice(&buf[..n]);
            }
        });
        Ok(PtyCtr {
            child,
            master: pty.master,
            out,
            reader: Some(reader),
            cmd: printable,
        })
    }
}

impl PtyCtr {
    /// Everything read from the terminal so far, with the terminal's `\r` removed.
    pub fn output(&self) -> String {
        let raw = self.out.lock().expect("pty output lock").clone();
        String::from_utf8_lossy(&raw).replace('\r', "")
    }

    /// Wait until the output contains `needle`.
    pub fn wait_output(&self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.output();
            if out.contains(needle) {
                return Ok(out);
            }
            // The reader ends once ctr is gone: nothing more will come.
            let ended = self.reader.as_ref().is_none_or(|r| r.is_finished());
            if ended && !self.output().contains(needle) {
                return Err(Error::WaitTimeout {
                    what: format!("{needle:?} on the terminal of {} (it exited)", self.cmd),
                    secs: 0,
                    last: format!("{:?}", self.output()),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout {
                    what: format!("{needle:?} on the terminal of {}", self.cmd),
                    secs: timeout.as_secs(),
                    last: format!("{out:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Set the terminal size (TIOCSWINSZ on the master): the kernel sends ctr SIGWINCH.
    pub fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        let ws = winsize(rows, cols);
        // SAFETY: the master fd is open for our lifetime and `ws` outlives the call.
        unsafe { set_winsize(self.master.as_raw_fd(), &ws) }
            .map(drop)
            .map_err(|e| io_err("TIOCSWINSZ", e))
    }

    /// Type `bytes` on the terminal (ctr forwards them to the process' stdin).
    pub fn send(&self, bytes: &[u8]) -> Result<()> {
        let mut done = 0;
        while done < bytes.len() {
            done += nix::unistd::write(&self.master, &bytes[done..])
                .map_err(|e| io_err("write to the pty master", e))?;
        }
        Ok(())
    }

    /// Wait for ctr to exit (killed after `timeout`); returns its status and the full output.
    pub fn wait(mut self, timeout: Duration) -> Result<(ExitStatus, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().ctx("wait ctr", "ctr")? {
                // The reader ends with EIO once the slave's last holder is gone.
                let drained = Instant::now() + Duration::from_secs(5);
                while self.reader.as_ref().is_some_and(|r| !r.is_finished())
                    && Instant::now() < drained
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return Ok((st, self.output()));
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    cmd: self.cmd.clone(),
                    secs: timeout.as_secs(),
                    stdout: self.output(),
                    stderr: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PtyCtr {
    fn drop(&mut self) {
        // Ours: kill by handle and reap. The reader thread is left to end on EIO.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
