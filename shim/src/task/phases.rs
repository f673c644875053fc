//! Wall time of each Create phase. Logged at debug level and, when
//! `[trace] phases_file` is set, appended there as one JSON line per Create
//! (what `make bench` reads to compare the cgroup phase with the pool on/off).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Phases {
    last: Instant,
    first: Instant,
    done: Vec<(&'static str, Duration)>,
    /// Figures beside the sequence, e.g. a phase's CPU time.
    extra: Vec<(&'static str, Duration)>,
}

impl Phases {
    pub fn start() -> Self {
        let now = Instant::now();
        Phases {
            last: now,
            first: now,
            done: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Ends the phase `name`, which ran since the previous mark.
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now - self.last));
        self.last = now;
    }

    /// Records a figure that is not a step of the sequence.
    pub fn extra(&mut self, name: &'static str, d: Duration) {
        self.extra.push((name, d));
    }

    fn total(&self) -> Duration {
        self.last - self.first
    }

    pub fn report(&self) -> String {
        let mut parts: Vec<String> = self
            .done
            .iter()
            .chain(&self.extra)
            .map(|(n, d)| format!("{n}={:.3}ms", ms(*d)))
            .collect();
        parts.push(format!("total={:.3}ms", ms(self.total())));
        parts.join(" ")
    }

    /// `{"id":…,"phases":{"sandbox":ms,…},"extra":{…},"total":ms}`.
    pub fn json_line(&self, id: &str) -> String {
        let phases: serde_json::Map<String, serde_json::Value> = self
            .done
            .iter()
            .map(|(n, d)| (n.to_string(), ms(*d).into()))
            .collect();
        let extra: serde_json::Map<String, serde_json::Value> = self
            .extra
            .iter()
            .map(|(n, d)| (n.to_string(), ms(*d).into()))
            .collect();
        let mut line = serde_json::json!({
            "id": id,
            "phases": phases,
            "extra": extra,
            "total": ms(self.total()),
        })
        .to_string();
        line.push('\n');
        line
    }

    /// Logs the phases, and appends them to `file` when one is configured.
    /// One `write` with O_APPEND keeps lines from concurrent shims whole.
    pub fn record(&self, id: &str, file: Option<&Path>) {
        tracing::debug!(id, "create phases: {}", self.report());
        let Some(path) = file else { return };
        let res = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(self.json_line(id).as_bytes()));
        if let Err(e) = res {
            tracing::warn!(id, path = %path.display(), "cannot append create phases: {e}");
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_every_phase_and_the_total() {
        let mut p = Phases::start();
        std::thread::sleep(Duration::from_millis(2));
        p.mark("cgroup");
        p.mark("place");
        p.extra("cgroup_cpu", Duration::from_micros(250));
        let v: serde_json::Value = serde_json::from_str(p.json_line("c1").trim()).unwrap();
        assert_eq!(v["id"], "c1");
        let cg = v["phases"]["cgroup"].as_f64().unwrap();
        assert!(cg >= 2.0, "{v}");
        let sum = cg + v["phases"]["place"].as_f64().unwrap();
        assert!((v["total"].as_f64().unwrap() - sum).abs() < 1e-6, "{v}");
        assert_eq!(
            v["extra"]["cgroup_cpu"].as_f64(),
            Some(0.25),
            "not in the total"
        );
    }

    #[test]
    fn concurrent_appends_stay_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("phases.jsonl");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let mut p = Phases::start();
                        p.mark("cgroup");
                        p.record(&format!("t{t}-{i}"), Some(&path));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 400);
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["phases"]["cgroup"].is_number(), "{l}");
        }
    }
}
