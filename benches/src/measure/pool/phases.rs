//! Reading the shim's `[trace] phases_file`: one JSON line per Create.

use std::path::Path;

use crate::results::PoolLevel;
use crate::stats::Summary;

/// Empties the file before a run (no shim is writing between runs).
pub fn reset(path: &Path) {
    let _ = std::fs::write(path, b"");
}

/// One Create's figures, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    pub cgroup: f64,
    pub cgroup_cpu: f64,
    /// The step's own wall time; absent from a shim that does not record it.
    pub cgroup_made: Option<f64>,
    pub place: f64,
    pub total: f64,
}

/// Each whole record in `text` (a torn or foreign line is skipped).
pub fn parse(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let p = &v["phases"];
            Some(Record {
                cgroup: p["cgroup"].as_f64()?,
                cgroup_cpu: v["extra"]["cgroup_cpu"].as_f64()?,
                cgroup_made: v["extra"]["cgroup_made"].as_f64(),
                place: p["place"].as_f64()?,
                total: v["total"].as_f64()?,
            })
        })
        .collect()
}

/// Adds the run's records (everything since the last reset) to `level`.
pub fn append(level: &mut PoolLevel, path: &Path) {
    let recs = parse(&std::fs::read_to_string(path).unwrap_or_default());
    for r in &recs {
        level.cgroup_ms.push(r.cgroup);
        level.cgroup_cpu_ms.push(r.cgroup_cpu);
        level.cgroup_made_ms.extend(r.cgroup_made);
        level.place_ms.push(r.place);
        level.create_ms.push(r.total);
    }
    level.cgroup = Summary::of(&level.cgroup_ms);
    level.cgroup_cpu = Summary::of(&level.cgroup_cpu_ms);
    level.place = Summary::of(&level.place_ms);
    level.create = Summary::of(&level.create_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_without_a_cgroup_phase_or_torn_lines_are_skipped() {
        let text = concat!(
            r#"{"id":"a","phases":{"sandbox":3.0,"cgroup":0.5,"place":0.1},"#,
            r#""extra":{"cgroup_cpu":0.2,"cgroup_made":1.5},"total":9.0}"#,
            "\n",
            r#"{"id":"b","phases":{"sandbox":3.0},"extra":{},"total":4.0}"#,
            "\n",
            r#"{"id":"c","phases":{"cgr"#,
        );
        let want = Record {
            cgroup: 0.5,
            cgroup_cpu: 0.2,
            cgroup_made: Some(1.5),
            place: 0.1,
            total: 9.0,
        };
        assert_eq!(parse(text), vec![want]);
    }
}
