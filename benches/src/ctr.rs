//! Thin client over the `ctr` binary, pointed at the private containerd.
//! Both runtimes pay the same ctr overhead, so ratios stay honest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::runtime::Runtime;

#[derive(Debug, Error)]
pub enum CtrError {
    #[error("cannot spawn ctr: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("`ctr {args}` timed out after {secs} s and was killed")]
    Timeout { args: String, secs: u64 },
    #[error("`ctr {verb}` failed ({status}): {stderr}")]
    Failed {
        /// The subcommand, e.g. "run" or "task kill" (the full line is long).
        verb: String,
        status: String,
        stderr: String,
    },
}

/// A task as listed by `ctr task ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub id: String,
    pub pid: u32,
    pub status: String,
}

#[derive(Debug, Clone)]
pub struct Ctr {
    bin: PathBuf,
    address: PathBuf,
    namespace: String,
    timeout: Duration,
}

impl Ctr {
    pub fn new(bin: &Path, address: &Path, namespace: &str, timeout: Duration) -> Self {
        Ctr {
            bin: bin.to_path_buf(),
            address: address.to_path_buf(),
            namespace: namespace.to_string(),
            timeout,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A `ctr` command with address and namespace set; stdin is /dev/null.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--address")
            .arg(&self.address)
            .arg("--namespace")
            .arg(&self.namespace)
            .stdin(Stdio::null());
        c
    }

    /// Runs `ctr <args>` to completion and returns its stdout. The wait blocks
    /// (no polling, so no added jitter); past the timeout ctr is killed.
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<String, CtrError> {
        let printable = || {
            args.iter()
                .map(|a| a.as_ref())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let verb = || {
            args.iter()
                .map(|a| a.as_ref())
                .take_while(|a| !a.starts_with('-'))
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut cmd = self.command();
        cmd.args(args.iter().map(|a| a.as_ref()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(CtrError::Spawn)?;
        // Taken before anyone can reap the child, so a late kill can never hit a
        // recycled pid.
        let pidfd = crate::pidfd::PidFd::open(child.id()).ok();
        let (tx, rx) = mpsc::channel::<std::io::Result<Output>>();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(self.timeout) {
            Ok(r) => r.map_err(CtrError::Spawn)?,
            Err(_) => {
                if let Some(fd) = &pidfd {
                    fd.kill();
                }
                let _ = rx.recv();
                return Err(CtrError::Timeout {
                    args: printable(),
                    secs: self.timeout.as_secs(),
                });
            }
        };
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(CtrError::Failed {
                verb: verb(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// `ctr run` arguments for a container on `rootfs`.
    pub fn run_args(
        rt: &Runtime,
        mode: RunMode,
        rootfs: &Path,
        id: &str,
        argv: &[&str],
    ) -> Vec<String> {
        let mut a = vec!["run".to_string()];
        a.extend(rt.ctr_flags());
        match mode {
            RunMode::Rm => a.push("--rm".into()),
            RunMode::Detached => {
                a.push("--detach".into());
                // Nobody reads a detached task's FIFOs.
                a.push("--null-io".into());
            }
        }
        a.push("--rootfs".into());
        a.push(rootfs.display().to_string());
        a.push(id.to_string());
        a.extend(argv.iter().map(|s| s.to_string()));
        a
    }

    /// `ctr run --rm`, timed end to end; `Ok(stdout, elapsed)`.
    pub fn run_rm(
        &self,
        rt: &Runtime,
        rootfs: &Path,
        id: &str,
        argv: &[&str],
    ) -> Result<(String, Duration), CtrError> {
        let args = Self::run_args(rt, RunMode::Rm, rootfs, id, argv);
        let t0 = Instant::now();
        let out = self.run(&args)?;
        Ok((out, t0.elapsed()))
    }

    /// `ctr run -d`: returns once the task has been started.
    pub fn run_detached(
        &self,
        rt: &Runtime,
        rootfs: &Path,
        id: &str,
        argv: &[&str],
    ) -> Result<(), CtrError> {
        self.run(&Self::run_args(rt, RunMode::Detached, rootfs, id, argv))
            .map(drop)
    }

    pub fn tasks(&self) -> Result<Vec<TaskInfo>, CtrError> {
        Ok(parse_task_ls(&self.run(&["task", "ls"])?))
    }

    /// Host pids of the task's processes (`ctr task ps`).
    pub fn task_pids(&self, id: &str) -> Result<Vec<u32>, CtrError> {
        let out = self.run(&["task", "ps", id])?;
        Ok(out
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect())
    }

    pub fn kill(&self, id: &str, signal: &str) -> Result<(), CtrError> {
        self.run(&["task", "kill", "--signal", signal, id])
            .map(drop)
    }

    /// Kills (SIGKILL) if needed, waits, and deletes the task.
    pub fn task_delete_force(&self, id: &str) -> Result<(), CtrError> {
        self.run(&["task", "delete", "--force", id]).map(drop)
    }

    pub fn container_rm(&self, id: &str) -> Result<(), CtrError> {
        self.run(&["containers", "rm", id]).map(drop)
    }

    pub fn containers(&self) -> Result<Vec<String>, CtrError> {
        Ok(self
            .run(&["containers", "ls", "--quiet"])?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }

    /// Removes a container whatever state its task is in. Used by clean-up,
    /// never timed.
    pub fn remove_everything(&self, id: &str) -> Result<(), CtrError> {
        // The task may not exist (created only, or already deleted).
        let _ = self.task_delete_force(id);
        self.container_rm(id)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    Rm,
    Detached,
}

/// Parses `ctr task ls`: a header then `ID PID STATUS` columns.
pub fn parse_task_ls(out: &str) -> Vec<TaskInfo> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let id = f.next()?.to_string();
            let pid = f.next()?.parse().ok()?;
            let status = f.next()?.to_string();
            Some(TaskInfo { id, pid, status })
        })
        .collect()
}

/// An error message short enough for a report, with the container id
/// replaced so that identical failures collapse into one message.
pub fn short_error(e: &impl std::fmt::Display, id: &str) -> String {
    let s = e.to_string().replace(id, "<id>");
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeKind;

    #[test]
    fn parses_task_list() {
        let out = "TASK      PID      STATUS    \nb-runc-1  4242     RUNNING\nb-x  0  STOPPED\n";
        let t = parse_task_ls(out);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].id, "b-runc-1");
        assert_eq!(t[0].pid, 4242);
        assert_eq!(t[1].status, "STOPPED");
    }

    #[test]
    fn detached_runs_have_null_io() {
        let rt = Runtime::plain(RuntimeKind::Runc);
        let a = Ctr::run_args(
            &rt,
            RunMode::Detached,
            Path::new("/r"),
            "id",
            &["sleep", "9"],
        );
        assert!(a.contains(&"--null-io".to_string()));
        assert_eq!(&a[a.len() - 4..], ["/r", "id", "sleep", "9"]);
    }
}
