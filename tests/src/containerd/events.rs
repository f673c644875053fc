//! `ctr events` in the background: every event containerd publishes, in order, for tests that
//! check which events a shim sent and in what order (e.g. TaskOOM before TaskExit).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Containerd;
use crate::error::{Error, IoContext, Result};

/// One line of `ctr events`: `<timestamp> <namespace> <topic> <json>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub namespace: String,
    /// e.g. `/tasks/exit`.
    pub topic: String,
    /// The event body (`{"container_id":...}`); `Null` when it was not JSON.
    pub body: serde_json::Value,
}

impl Event {
    /// Parse one output line; `None` for lines that are not events.
    pub fn parse(line: &str) -> Option<Event> {
        // The timestamp has spaces ("2024-01-01 10:00:00.1 +0000 UTC"): the topic is the first
        // field starting with '/', the namespace the one before it, the body the rest.
        let fields: Vec<&str> = line.split(' ').collect();
        let t = fields.iter().position(|f| f.starts_with('/'))?;
        let namespace = fields.get(t.checked_sub(1)?)?.to_string();
        let rest = fields[t + 1..].join(" ");
        Some(Event {
            namespace,
            topic: fields[t].to_string(),
            body: serde_json::from_str(rest.trim()).unwrap_or(serde_json::Value::Null),
        })
    }

    /// A string field of the body (`container_id`, `exec_id`, `id`, ...).
    pub fn field(&self, key: &str) -> Option<&str> {
        self.body.get(key).and_then(|v| v.as_str())
    }

    /// Whether this event is about container `id`, whatever the field is called.
    pub fn is_for(&self, id: &str) -> bool {
        self.field("container_id") == Some(id) || self.field("id") == Some(id)
    }
}

/// A running `ctr events`; killed (it is ours) on drop.
pub struct EventWatch {
    child: Child,
    seen: Arc<Mutex<Vec<Event>>>,
    reader: Option<JoinHandle<()>>,
    namespace: String,
}

impl std::fmt::Debug for EventWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventWatch({} events)", self.events().len())
    }
}

impl Containerd {
    /// Start `ctr events` and return once it is subscribed (it has seen an event the helper
    /// provoked by labelling the instance namespace), so no later event is missed.
    pub fn watch_events(&self) -> Result<EventWatch> {
        self.watch_events_in(&self.namespace)
    }

    /// [`Containerd::watch_events`] for namespace `ns` (e.g. [`super::K8S_NAMESPACE`]).
    pub fn watch_events_in(&self, ns: &str) -> Result<EventWatch> {
        let mut c = self.ctr_command(ns);
        c.arg("events")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().ctx("spawn ctr events", self.ctr_path())?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take();
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            let Some(out) = stdout else { return };
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Some(ev) = Event::parse(&line) {
                    sink.lock().expect("events lock").push(ev);
                }
            }
        });
        let watch = EventWatch {
            child,
            seen,
            reader: Some(reader),
            namespace: ns.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0.. {
            let label = format!("rund-it-probe={i}");
            self.ctr_in(ns, &["namespaces", "label", ns, &label])?
                .check()?;
            let probe = |e: &Event| e.topic == "/namespaces/update";
            if watch
                .wait_for("namespace update", probe, Duration::from_millis(200))
                .is_ok()
            {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout {
                    what: "ctr events to subscribe".into(),
                    secs: 30,
                    last: format!("{:?}", watch.events()),
                });
            }
        }
        Ok(watch)
    }
}

impl EventWatch {
    /// All events seen so far in this instance's namespace, in arrival order.
    pub fn events(&self) -> Vec<Event> {
        self.seen
            .lock()
            .expect("events lock")
            .iter()
            .filter(|e| e.namespace == self.namespace)
            .cloned()
            .collect()
    }

    /// Topics of the events about container `id`, in order.
    pub fn topics_for(&self, id: &str) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| e.is_for(id))
            .map(|e| e.topic)
            .collect()
    }

    /// Wait until an event matching `pred` arrives; returns it.
    pub fn wait_for(
        &self,
        what: &str,
        pred: impl Fn(&Event) -> bool,
        timeout: Duration,
    ) -> Result<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                return Ok(e);
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout {
                    what: format!("event {what}"),
                    secs: timeout.as_secs(),
                    last: format!("{:?}", self.events()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for `topic` about container `id`.
    pub fn wait_topic(&self, id: &str, topic: &str, timeout: Duration) -> Result<Event> {
        self.wait_for(
            &format!("{topic} for {id}"),
            |e| e.topic == topic && e.is_for(id),
            timeout,
        )
    }
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        // We started this ctr: kill it by its handle and reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ctr_event_lines() {
        let l = "2024-05-01 10:00:00.123 +0000 UTC rit-ab /tasks/oom {\"container_id\":\"c1\"}";
        let e = Event::parse(l).unwrap();
        assert_eq!(
            (e.namespace.as_str(), e.topic.as_str()),
            ("rit-ab", "/tasks/oom")
        );
        assert!(e.is_for("c1") && !e.is_for("c2"));
        let l = "2024-05-01 10:00:00 +0000 UTC ns /tasks/exit {\"container_id\":\"c\",\"exit_status\":137}";
        assert_eq!(Event::parse(l).unwrap().body["exit_status"], 137);
        assert!(Event::parse("no topic here").is_none());
    }
}
