//! The shim binary run directly, as containerd would after `start`: the long-running server
//! (no action) on a private socket, or a one-shot action such as `delete`.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use containerd_shim_protos::api::ShutdownRequest;
use containerd_shim_protos::shim_async::{Client, TaskClient};
use containerd_shim_protos::ttrpc::context::{self, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::bundle::{Bundle, NAMESPACE};
use super::error::{IoCtx, Result, ShimHarnessError};
use super::events::FakeEvents;
use super::residue::agents_of;
use crate::bins::{RundBins, SHIM_BIN};
use crate::leaks::mount_points_under;

/// How long the harness waits for the server to listen or to exit: a hang guard only.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

/// A ttrpc context for one unary call, bounded by [`HANG_GUARD`].
pub fn ctx() -> Context {
    context::with_duration(HANG_GUARD)
}

/// A running shim server that this harness started.
pub struct ShimServer {
    /// The server as a child of this process; `None` when `start` forked it (it is known by
    /// its pid, and whoever adopted it reaps it).
    child: Option<Child>,
    /// The shim's pid (the server process itself).
    pub pid: u32,
    /// The shim's unix socket path.
    pub socket: PathBuf,
    /// The bundle (the shim's cwd).
    pub bundle: PathBuf,
    /// A connected Task client.
    pub task: TaskClient,
    stderr: PathBuf,
}

/// How a shim server ended.
#[derive(Debug)]
pub struct Ended {
    /// Its exit status, if it exited (by itself or after the harness killed it).
    pub status: Option<ExitStatus>,
    /// Whether it exited on its own after Shutdown (else the harness killed it).
    pub by_itself: bool,
}

impl ShimServer {
    /// Starts `containerd-shim-rund-v2 -namespace rit-direct -id <id> -address /nonexistent
    /// -socket unix://<scratch>/shim.sock` in `bundle`, publishing to `events`, and connects a
    /// Task client once it listens.
    pub async fn start(bins: &RundBins, bundle: &Bundle, events: &FakeEvents) -> Result<Self> {
        Self::start_with(bins, bundle, events, "").await
    }

    /// Like [`ShimServer::start`], with `extra_config` (TOML) appended to the harness' rund
    /// config.
    pub async fn start_with(
        bins: &RundBins,
        bundle: &Bundle,
        events: &FakeEvents,
        extra_config: &str,
    ) -> Result<Self> {
        let config = super::state::process_config_with(extra_config)?;
        let socket = bundle.scratch().join("shim.sock");
        let stderr = bundle.scratch().join("shim.stderr");
        let err_file = File::create(&stderr).io("create shim stderr", &stderr)?;
        let mut cmd = Command::new(bins.path(SHIM_BIN));
        cmd.args(["-namespace", NAMESPACE, "-id", &bundle.id])
            .args(["-address", "/nonexistent"])
            .arg("-socket")
            .arg(format!("unix://{}", socket.display()))
            .current_dir(&bundle.path)
            .env("TTRPC_ADDRESS", events.address())
            .env("RUND_CONFIG", &config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err_file);
        let mut child = cmd.spawn().io("spawn shim", bins.path(SHIM_BIN))?;
        let pid = child.id();
        // The server points its stdout elsewhere once it listens, or prints an error and exits:
        // EOF on the pipe means either.
        let out = child.stdout.take().expect("stdout is piped");
        let read = tokio::task::spawn_blocking(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut { out }, &mut s);
            s
        });
        let printed = match tokio::time::timeout(HANG_GUARD, read).await {
            Ok(Ok(s)) => s,
            _ => String::from("<no EOF on stdout>"),
        };
        let fail = |mut child: Child, reason: String| {
            let _ = child.kill();
            let _ = child.wait();
            ShimHarnessError::NotServing {
                reason,
                stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
                log: bundle.log(),
            }
        };
        if let Ok(Some(st)) = child.try_wait() {
            return Err(fail(child, format!("exited ({st}), printed {printed:?}")));
        }
        let addr = format!("unix://{}", socket.display());
        let client = match Client::connect(&addr).await {
            Ok(c) => c,
            Err(e) => return Err(fail(child, format!("connect {addr}: {e}"))),
        };
        Ok(ShimServer {
            child: Some(child),
            pid,
            socket,
            bundle: bundle.path.clone(),
            task: TaskClient::new(client),
            stderr,
        })
    }

    /// Runs the `start` action in `bundle`, as containerd does: it forks the server, which
    /// then runs what `start` told it (the head starts), and prints the address. The server is
    /// found by the pid Connect reports.
    pub async fn start_forked(
        bins: &RundBins,
        bundle: &Bundle,
        events: &FakeEvents,
        extra_config: &str,
    ) -> Result<Self> {
        let config = super::state::process_config_with(extra_config)?;
        let stderr = bundle.scratch().join("shim.stderr");
        let config = config.display().to_string();
        let events_addr = events.address().display().to_string();
        let env = [
            ("TTRPC_ADDRESS", events_addr.as_str()),
            ("RUND_CONFIG", config.as_str()),
        ];
        let out = tokio::task::block_in_place(|| run_action_env(bins, bundle, "start", &env))?;
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let not_serving = |reason: String| ShimHarnessError::NotServing {
            reason,
            stderr: out.stderr.clone(),
            log: bundle.log(),
        };
        if !out.status.success() {
            return Err(not_serving(format!("start exited ({})", out.status)));
        }
        let addr = printed;
        let socket = PathBuf::from(addr.trim_start_matches("unix://"));
        let client = Client::connect(&addr)
            .await
            .map_err(|e| not_serving(format!("connect {addr}: {e}")))?;
        let task = TaskClient::new(client);
        let req = containerd_shim_protos::api::ConnectRequest {
            id: bundle.id.clone(),
            ..Default::default()
        };
        let pid = task
            .connect(ctx(), &req)
            .await
            .map_err(|e| not_serving(format!("Connect: {e}")))?
            .shim_pid;
        std::fs::write(&stderr, &out.stderr).io("write shim stderr", &stderr)?;
        Ok(ShimServer {
            child: None,
            pid,
            socket,
            bundle: bundle.path.clone(),
            task,
            stderr,
        })
    }

    /// What the server wrote to stderr (its stdout after it started goes there too).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Whether the server process is still running (it is reaped if it exited).
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => running(self.pid),
        }
    }

    /// Reaps the server if it is this process's child and has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        match &mut self.child {
            Some(c) => c.try_wait().ok().flatten(),
            // Not ours to reap: "exited" with no status we can read.
            None => (!running(self.pid)).then(|| ExitStatus::from_raw(0)),
        }
    }

    /// Waits up to `limit` for the server to exit by itself.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.exited() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs the server alone (its agents live on), as an OOM kill would, and waits until
    /// it is gone.
    pub async fn crash(&mut self) {
        kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL).expect("SIGKILL the shim");
        assert!(
            self.wait_exit(HANG_GUARD).await.is_some(),
            "the shim {} outlived SIGKILL",
            self.pid
        );
    }

    /// Sends Shutdown and waits for the server to exit; kills it (and its agents) if it does
    /// not.
    pub async fn shutdown(mut self) -> Ended {
        let req = ShutdownRequest {
            id: String::new(),
            now: false,
            ..Default::default()
        };
        // The server may drop the connection as it exits: that is not an error here.
        let _ = self.task.shutdown(ctx(), &req).await;
        let status = self.wait_exit(HANG_GUARD).await;
        let by_itself = status.is_some();
        let status = match status {
            Some(s) => Some(s),
            None => {
                self.kill();
                self.exited()
            }
        };
        Ended { status, by_itself }
    }

    /// SIGKILLs the server (by its pid: we started it) and the rund-agents it started, then
    /// reaps the server. Sandbox agents are pid 1 of their pid namespace: killing them ends
    /// their containers too.
    fn kill(&mut self) {
        if !self.alive() {
            return;
        }
        let agents = agents_of(self.pid);
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        for a in agents {
            let _ = kill(Pid::from_raw(a as i32), Signal::SIGKILL);
        }
        if let Some(c) = &mut self.child {
            let _ = c.wait();
        }
    }
}

/// Whether `pid` runs (a zombie does not).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

impl Drop for ShimServer {
    fn drop(&mut self) {
        self.kill();
        unmount_under(&self.bundle);
    }
}

/// Lazily unmounts everything under `dir`, deepest first (what a killed shim left).
pub fn unmount_under(dir: &Path) {
    let mut mounts = mount_points_under(&[dir.to_path_buf()]);
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounts {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The output of a one-shot action, stdout kept as bytes (`delete` writes protobuf).
#[derive(Debug)]
pub struct ActionOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl ActionOutput {
    /// Exit code, or 128+signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| 128 + self.status.signal().unwrap_or(0))
    }
}

/// Runs `containerd-shim-rund-v2 -namespace rit-direct -address /nonexistent -id <id>
/// -bundle <bundle> <action>` in the bundle, as containerd runs `delete`.
pub fn run_action(bins: &RundBins, bundle: &Bundle, action: &str) -> Result<ActionOutput> {
    run_action_env(bins, bundle, action, &[])
}

/// [`run_action`] with extra environment variables.
pub fn run_action_env(
    bins: &RundBins,
    bundle: &Bundle,
    action: &str,
    env: &[(&str, &str)],
) -> Result<ActionOutput> {
    let config = super::state::process_config()?;
    let mut cmd = Command::new(bins.path(SHIM_BIN));
    cmd.args(["-namespace", NAMESPACE, "-address", "/nonexistent"])
        .args(["-id", &bundle.id])
        .arg("-bundle")
        .arg(&bundle.path)
        .arg(action)
        .current_dir(&bundle.path)
        .env("RUND_CONFIG", config)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().io("spawn shim action", bins.path(SHIM_BIN))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => {
            let out = out.io("wait shim action", bins.path(SHIM_BIN))?;
            Ok(ActionOutput {
                status: out.status,
                stdout: out.stdout,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
        Err(_) => {
            // We started it: kill it by pid; the waiting thread reaps it.
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            Err(ShimHarnessError::WaitTimeout {
                what: format!("shim {action}"),
                secs: HANG_GUARD.as_secs(),
                seen: String::new(),
            })
        }
    }
}
