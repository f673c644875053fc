//! `ctr task ...` helpers: kill, ps, ls, delete, exec, pause, metrics, waiting for a status.

use std::time::{Duration, Instant};

use super::ctr::strs;
use super::Containerd;
use crate::cmd::{CmdOutput, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};

/// A row of `ctr task ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub id: String,
    pub pid: u32,
    /// RUNNING, STOPPED, PAUSED, CREATED, ... as ctr prints it.
    pub status: String,
}

impl Containerd {
    /// `ctr task kill [--all] --signal <sig> <id>`; `sig` as ctr takes it ("SIGTERM", "9").
    pub fn task_kill(&self, id: &str, signal: &str, all: bool) -> Result<CmdOutput> {
        let mut a = vec!["task", "kill", "--signal", signal];
        if all {
            a.push("--all");
        }
        a.push(id);
        self.ctr(&a)?.check()
    }

    /// Pids of `ctr task ps <id>`.
    pub fn task_ps(&self, id: &str) -> Result<Vec<u32>> {
        let out = self.ctr(&["task", "ps", id])?.check()?;
        parse_first_column(&out, "PID")
    }

    /// Rows of `ctr task ls`.
    pub fn task_list(&self) -> Result<Vec<TaskInfo>> {
        let out = self.ctr(&["task", "ls"])?.check()?;
        let mut tasks = Vec::new();
        for line in out.stdout.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 3 {
                continue;
            }
            let pid = f[1].parse().map_err(|_| Error::Parse {
                cmd: out.cmd.clone(),
                detail: format!("bad pid in {line:?}"),
            })?;
            tasks.push(TaskInfo {
                id: f[0].into(),
                pid,
                status: f[2].into(),
            });
        }
        Ok(tasks)
    }

    /// Status of task `id`, `None` when there is no such task.
    pub fn task_status(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .task_list()?
            .into_iter()
            .find(|t| t.id == id)
            .map(|t| t.status))
    }

    /// `ctr task delete [--force] <id>`; the raw output (tests check failures too).
    pub fn task_delete(&self, id: &str, force: bool) -> Result<CmdOutput> {
        let mut a = vec!["task", "delete"];
        if force {
            a.push("--force");
        }
        a.push(id);
        self.ctr(&a)
    }

    /// `ctr container delete <id>`; the raw output.
    pub fn container_delete(&self, id: &str) -> Result<CmdOutput> {
        self.ctr(&["container", "delete", id])
    }

    /// Poll `ctr task ls` until task `id` has `status` (case-insensitive), or, with
    /// `status == "absent"`, until it is gone.
    pub fn wait_for_status(&self, id: &str, status: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.task_status(id)?;
            let done = match &now {
                None => status.eq_ignore_ascii_case("absent"),
                Some(s) => s.eq_ignore_ascii_case(status),
            };
            if done {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout {
                    what: format!("task {id} to be {status}"),
                    secs: timeout.as_secs(),
                    last: format!("{now:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Best effort: kill, delete the task and the container. For test clean-up paths.
    pub fn remove_container(&self, id: &str) {
        let _ = self.ctr(&["task", "kill", "--all", "--signal", "SIGKILL", id]);
        let _ = self.task_delete(id, true);
        let _ = self.container_delete(id);
    }

    /// `ctr task exec [-t] --exec-id <exec_id> <id> <args>`; the raw output (code = exec's code).
    pub fn task_exec(
        &self,
        id: &str,
        exec_id: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<CmdOutput> {
        let mut a = strs(&["task", "exec", "--exec-id", exec_id, id]);
        a.extend(strs(args));
        self.ctr_full(&self.namespace, &a, stdin, DEFAULT_TIMEOUT)
    }

    /// `ctr task pause <id>`.
    pub fn task_pause(&self, id: &str) -> Result<CmdOutput> {
        self.ctr(&["task", "pause", id])?.check()
    }

    /// `ctr task resume <id>`.
    pub fn task_resume(&self, id: &str) -> Result<CmdOutput> {
        self.ctr(&["task", "resume", id])?.check()
    }

    /// `ctr task metrics --format json <id>`, parsed.
    pub fn task_metrics(&self, id: &str) -> Result<serde_json::Value> {
        let out = self
            .ctr(&["task", "metrics", "--format", "json", id])?
            .check()?;
        Ok(serde_json::from_str(&out.stdout)?)
    }
}

/// Parse the first column of a table whose header's first column is `header`.
fn parse_first_column(out: &CmdOutput, header: &str) -> Result<Vec<u32>> {
    let mut lines = out.stdout.lines();
    match lines.next() {
        Some(h) if h.split_whitespace().next() == Some(header) => {}
        other => {
            return Err(Error::Parse {
                cmd: out.cmd.clone(),
                detail: format!("expected header {header}, got {other:?}"),
            })
        }
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| Error::Parse {
                    cmd: out.cmd.clone(),
                    detail: format!("bad row {l:?}"),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(stdout: &str) -> CmdOutput {
        use std::os::unix::process::ExitStatusExt;
        CmdOutput {
            cmd: "ctr task ps".into(),
            status: std::process::ExitStatus::from_raw(0),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn parses_task_ps() {
        let o = out("PID     INFO\n123     -\n456     -\n");
        assert_eq!(parse_first_column(&o, "PID").unwrap(), vec![123, 456]);
        assert!(parse_first_column(&out("garbage\n"), "PID").is_err());
        assert!(parse_first_column(&out("PID INFO\nx -\n"), "PID").is_err());
    }
}
