//! A `ctr events` subscription, parsed into task events with arrival times.
//! Exit times are taken from here: it is containerd's own view of the task.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::ctr::Ctr;

#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvent {
    /// "start", "exit", ... (the part after `/tasks/`).
    pub kind: String,
    pub container_id: String,
    pub exit_status: Option<i64>,
}

/// Parses one `ctr events` line:
/// `<date> <time> <tz> <tz> <namespace> /tasks/exit {json}`.
pub fn parse_line(line: &str) -> Option<TaskEvent> {
    let at = line.find(" /tasks/")?;
    let rest = &line[at + " /tasks/".len()..];
    let (kind, json) = rest.split_once(' ')?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let container_id = v.get("container_id")?.as_str()?.to_string();
    // protobuf JSON omits zero values: a missing exit_status on exit means 0.
    let exit_status =
        (kind == "exit").then(|| v.get("exit_status").and_then(|s| s.as_i64()).unwrap_or(0));
    Some(TaskEvent {
        kind: kind.to_string(),
        container_id,
        exit_status,
    })
}

pub struct Events {
    child: Child,
    rx: Receiver<(TaskEvent, Instant)>,
}

impl Events {
    pub fn subscribe(ctr: &Ctr) -> std::io::Result<Events> {
        let mut child = ctr
            .command()
            .arg("events")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(ev) = parse_line(&line) {
                    if tx.send((ev, Instant::now())).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Events { child, rx })
    }

    /// Waits until `kind` arrives for `id`, dropping other events.
    pub fn wait_for(
        &self,
        id: &str,
        kind: &str,
        deadline: Instant,
    ) -> Option<(TaskEvent, Instant)> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok((ev, t)) if ev.container_id == id && ev.kind == kind => return Some((ev, t)),
                Ok(_) => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return None
                }
            }
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // Our own child, killed through its handle and reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exit_events() {
        let l = r#"2026-11-22 02:15:20.374108897 +0000 UTC ns /tasks/exit {"container_id":"t1","id":"t1","pid":28830,"exit_status":143,"exited_at":"x"}"#;
        let e = parse_line(l).unwrap();
        assert_eq!(e.kind, "exit");
        assert_eq!(e.container_id, "t1");
        assert_eq!(e.exit_status, Some(143));
        let zero = r#"d t +0000 UTC ns /tasks/exit {"container_id":"t1","id":"t1","pid":1}"#;
        assert_eq!(parse_line(zero).unwrap().exit_status, Some(0));
        let start = r#"d t +0000 UTC ns /tasks/start {"container_id":"t1","pid":1}"#;
        assert_eq!(parse_line(start).unwrap().exit_status, None);
        assert_eq!(
            parse_line(r#"d t +0000 UTC ns /containers/create {"id":"t1"}"#),
            None
        );
    }
}
