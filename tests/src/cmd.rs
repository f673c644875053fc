//! Running a helper command (ctr, mostly) with captured output, optional stdin and a deadline,
//! so a hung shim turns into a test failure instead of a hung test run.

use std::io::{Read, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};

/// Default deadline for one ctr invocation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished command produced.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// The printable command line (for messages).
    pub cmd: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    /// Exit code, or 128+signal if the command itself died by a signal.
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.status
            .code()
            .unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }

    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `Ok(self)` if the command succeeded, else an error that carries stderr.
    pub fn check(self) -> Result<CmdOutput> {
        if self.success() {
            Ok(self)
        } else {
            Err(Error::Command {
                cmd: self.cmd,
                status: self.status.to_string(),
                stderr: self.stderr,
            })
        }
    }
}

/// Run `cmd` to completion: stdin gets `input` (then EOF) or /dev/null; stdout and stderr are
/// captured; after `timeout` the command is killed (we started it) and `Error::Timeout` returned.
pub fn run(cmd: Command, input: Option<&[u8]>, timeout: Duration) -> Result<CmdOutput> {
    let feeder = input.map(|data| {
        let data = data.to_vec();
        Box::new(move |mut stdin: ChildStdin| {
            // A child that exits without reading gives EPIPE: not our failure.
            let _ = stdin.write_all(&data);
        }) as Feeder
    });
    run_fed(cmd, feeder, timeout)
}

/// Writes a child's stdin on its own thread; dropping the handle closes it (EOF).
pub type Feeder = Box<dyn FnOnce(ChildStdin) + Send + 'static>;

/// Like [`run`], with a custom stdin writer (e.g. one that waits for the task to start).
pub fn run_fed(mut cmd: Command, input: Option<Feeder>, timeout: Duration) -> Result<CmdOutput> {
    let printable = format!("{cmd:?}");
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let program = cmd.get_program().to_os_string();
    let mut child = cmd.spawn().ctx("spawn", program)?;

    let writer = match (input, child.stdin.take()) {
        (Some(feed), Some(stdin)) => Some(thread::spawn(move || feed(stdin))),
        _ => None,
    };
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());

    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().ctx("wait", printable.clone())? {
            break Some(st);
        }
        if Instant::now() >= deadline {
            // We own this child: kill it by its handle, then reap it.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(10));
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Ok(CmdOutput {
            cmd: printable,
            status,
            stdout,
            stderr,
        }),
        None => Err(Error::Timeout {
            cmd: printable,
            secs: timeout.as_secs(),
            stdout,
            stderr,
        }),
    }
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}
