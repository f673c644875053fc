//! Container stdio: containerd's FIFOs on the host side.
//!
//! stdout/stderr FIFOs are handed to the container directly (no copy loop);
//! stdin goes through a pipe the shim feeds, so CloseIO can end it; a
//! terminal gets a pty whose master the shim copies to and from the FIFOs.

pub mod pty;
pub mod stdin;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rund_proto::fdpass::FdKind;

#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("opening {what} {path}: {source}")]
    Open {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("stdio {0}: only FIFO and file paths are supported, not {1}")]
    Scheme(&'static str, String),
    #[error("pty: {0}")]
    Pty(String),
}

/// A stdio fd the shim copies through (per-node mode: the node's keeper
/// holds a copy, so a restarted node shim copies on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoRole {
    PtyMaster,
    /// The stdout FIFO a pty's output goes to.
    PtyOut,
    /// containerd's stdin FIFO, read end.
    StdinFifo,
    /// The write end of the pipe that is a container's stdin.
    StdinPipe,
}

/// Gives the kept copy back when dropped.
pub type KeepGuard = Box<dyn Send + Sync>;

/// Has the node's keeper hold a copy of a stdio fd until the guard drops.
pub type KeepIo = Arc<dyn Fn(IoRole, BorrowedFd<'_>) -> Option<KeepGuard> + Send + Sync>;

/// The stdio fds of one process a dead node shim left, by role, with guards.
pub type AdoptedIo = HashMap<IoRole, (OwnedFd, KeepGuard)>;

fn kept(keep: Option<&KeepIo>, role: IoRole, fd: BorrowedFd<'_>) -> Option<KeepGuard> {
    keep.and_then(|k| k(role, fd))
}

/// A process's stdio as containerd gave it: FIFO paths and the terminal flag.
#[derive(Debug, Clone, Default)]
pub struct Stdio {
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
    pub terminal: bool,
}

impl Stdio {
    pub fn of(stdin: &str, stdout: &str, stderr: &str, terminal: bool) -> Stdio {
        Stdio {
            stdin: stdin.into(),
            stdout: stdout.into(),
            stderr: stderr.into(),
            terminal,
        }
    }
}

/// Host-side stdio of one process: the fds to pass and what the shim keeps.
pub struct OpenedStdio {
    /// (kind, fd) pairs to send to the agent; dropped once sent.
    pub pass: Vec<(FdKind, OwnedFd)>,
    pub stdin: Option<stdin::StdinFeeder>,
    pub pty: Option<pty::Pty>,
}

/// Opens the process's stdio. Nothing stays open on error. `keep`: the fds
/// the shim copies through go to the node's keeper too.
pub async fn open(paths: &Stdio, keep: Option<&KeepIo>) -> Result<OpenedStdio, IoError> {
    if paths.terminal {
        let pty = pty::Pty::open(paths, keep).await?;
        let slave = pty.take_slave()?;
        return Ok(OpenedStdio {
            pass: vec![(FdKind::Console, slave)],
            stdin: None,
            pty: Some(pty),
        });
    }
    let mut pass = Vec::new();
    for (kind, what, path) in [
        (FdKind::Stdout, "stdout", &paths.stdout),
        (FdKind::Stderr, "stderr", &paths.stderr),
    ] {
        if let Some(f) = open_output(what, path).await? {
            pass.push((kind, OwnedFd::from(f)));
        }
    }
    let mut stdin = None;
    if !paths.stdin.is_empty() {
        let (feeder, read_end) = stdin::StdinFeeder::new(&paths.stdin, keep)?;
        pass.push((FdKind::Stdin, read_end));
        stdin = Some(feeder);
    }
    Ok(OpenedStdio {
        pass,
        stdin,
        pty: None,
    })
}

fn strip_scheme<'a>(what: &'static str, path: &'a str) -> Result<&'a str, IoError> {
    match path.split_once("://") {
        None => Ok(path),
        Some(("file", rest)) => Ok(rest),
        Some(_) => Err(IoError::Scheme(what, path.to_string())),
    }
}

/// How long Create waits for the client to open an output FIFO's read side.
const READER_WAIT: Duration = Duration::from_secs(10);

/// Opens an output FIFO (or file) for writing. The client (ctr, CRI) opens
/// the read side in the background as it calls Create, so a FIFO without a
/// reader yet is retried: a process that wrote and exited before the reader
/// came would lose its output with the pipe. Past `READER_WAIT` it is opened
/// read-write (never blocks, never SIGPIPEs), as before a reader.
pub async fn open_output(what: &'static str, path: &str) -> Result<Option<File>, IoError> {
    open_output_within(what, path, READER_WAIT).await
}

async fn open_output_within(
    what: &'static str,
    path: &str,
    reader_wait: Duration,
) -> Result<Option<File>, IoError> {
    if path.is_empty() {
        return Ok(None);
    }
    let p = strip_scheme(what, path)?;
    let err = |source| IoError::Open {
        what,
        path: p.to_string(),
        source,
    };
    let is_fifo = std::fs::metadata(p)
        .map(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()))
        .unwrap_or(false);
    let file = if is_fifo {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p)
            {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                    if start.elapsed() >= reader_wait {
                        tracing::warn!(what, path = p, "no reader after {reader_wait:?}");
                        break OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(p)
                            .map_err(err)?;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(err(e)),
            }
        }
    } else {
        OpenOptions::new()
            .append(true)
            .create(true)
            .open(p)
            .map_err(err)?
    };
    set_blocking(&file).map_err(err)?;
    Ok(Some(file))
}

fn set_blocking(f: &File) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(f, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(f, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(())
}

/// True when `path` names an existing FIFO.
pub fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()))
        .unwrap_or(false)
}

/// Registers an owned fd with the tokio reactor.
pub fn async_fd(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open, with the same number, until the AsyncFd
    // that owns it is dropped.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

/// Registers any fd-owning value with the tokio reactor.
pub fn async_fd_of<T: std::os::fd::AsRawFd>(v: T) -> std::io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: callers pass values that own their fd (OwnedFd, an eventfd
    // wrapper): it stays open, with the same number, until the AsyncFd that
    // owns the value is dropped.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(v, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn fifo(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let p = dir.path().join("out");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        p
    }

    #[tokio::test]
    async fn output_waits_for_a_late_reader_so_nothing_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let p = fifo(&dir);
        let (written_tx, written_rx) = std::sync::mpsc::channel::<()>();
        let rp = p.clone();
        // The client's reader comes late, as ctr's does under load.
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut r = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&rp)
                .unwrap();
            written_rx.recv().unwrap();
            let mut got = String::new();
            let _ = r.read_to_string(&mut got);
            got
        });
        // The process writes and exits at once.
        let mut f = open_output("stdout", p.to_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        f.write_all(b"hi\n").unwrap();
        drop(f);
        written_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), "hi\n");
    }

    #[tokio::test]
    async fn output_to_fifo_without_reader_does_not_block_forever() {
        let dir = tempfile::tempdir().unwrap();
        let p = fifo(&dir);
        let t0 = Instant::now();
        let f = open_output_within("stdout", p.to_str().unwrap(), Duration::from_millis(50))
            .await
            .unwrap();
        assert!(f.is_some());
        assert!(t0.elapsed() >= Duration::from_millis(50), "it waited first");
    }

    #[tokio::test]
    async fn unknown_scheme_is_refused() {
        let e = open_output("stdout", "binary:///usr/bin/logger")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("binary://"), "{e}");
    }

    #[tokio::test]
    async fn empty_path_is_none() {
        assert!(open_output("stderr", "").await.unwrap().is_none());
    }
}
