//! The shim's Create phase records (`[trace] phases_file`, one JSON line per
//! Create: `{"id","phases":{…},"extra":{…},"total"}`), matched to this run's
//! pod sandboxes and containers.

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;

use crate::stats::Summary;

/// One Create's figures, in ms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    pub id: String,
    /// The wall time the Create waited for the cgroup.
    pub cgroup: f64,
    pub total: f64,
    /// The cgroup's creation itself when it runs beside the critical path
    /// (`extra.cgroup_made`); absent when the shim does not record it.
    pub cgroup_made: Option<f64>,
}

/// Each whole record in `text` that has a cgroup phase (a torn or foreign
/// line is skipped).
pub fn parse(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some(Record {
                id: v["id"].as_str()?.to_string(),
                cgroup: v["phases"]["cgroup"].as_f64()?,
                total: v["total"].as_f64()?,
                cgroup_made: v["extra"]["cgroup_made"].as_f64(),
            })
        })
        .collect()
}

/// Empties the file before a run (no shim of this handler is running).
pub fn reset(path: &Path) {
    let _ = std::fs::write(path, b"");
}

/// The Creates of one kind (the pods' sandboxes, or their containers).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseSet {
    pub records: Vec<Record>,
    pub cgroup: Option<Summary>,
    pub total: Option<Summary>,
    /// Σ cgroup / Σ total over the records.
    pub cgroup_share: Option<f64>,
    /// Median of `cgroup_made` when every record has it.
    pub cgroup_made_median: Option<f64>,
}

impl PhaseSet {
    pub fn of(records: Vec<Record>) -> PhaseSet {
        let cg: Vec<f64> = records.iter().map(|r| r.cgroup).collect();
        let tot: Vec<f64> = records.iter().map(|r| r.total).collect();
        let sum_total: f64 = tot.iter().sum();
        let made: Option<Vec<f64>> = records.iter().map(|r| r.cgroup_made).collect();
        PhaseSet {
            cgroup: Summary::of(&cg),
            total: Summary::of(&tot),
            cgroup_share: (sum_total > 0.0).then(|| cg.iter().sum::<f64>() / sum_total),
            cgroup_made_median: made
                .filter(|m| !m.is_empty())
                .and_then(|m| Summary::of(&m))
                .map(|s| s.median),
            records,
        }
    }
}

/// One run's records split by what they created.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunPhases {
    /// RunPodSandbox's Create (the sandbox container).
    pub sandbox: PhaseSet,
    /// CreateContainer's Create (the app container).
    pub container: PhaseSet,
    /// Records of no pod of this run (another config's shim writing here).
    pub foreign: usize,
}

pub fn split(
    records: Vec<Record>,
    sandboxes: &HashSet<String>,
    containers: &HashSet<String>,
) -> RunPhases {
    let (mut sb, mut ct, mut foreign) = (Vec::new(), Vec::new(), 0);
    for r in records {
        if sandboxes.contains(&r.id) {
            sb.push(r);
        } else if containers.contains(&r.id) {
            ct.push(r);
        } else {
            foreign += 1;
        }
    }
    RunPhases {
        sandbox: PhaseSet::of(sb),
        container: PhaseSet::of(ct),
        foreign,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cgroup_made_when_present_and_skips_torn_lines() {
        let text = concat!(
            r#"{"id":"s1","phases":{"sandbox":3.0,"cgroup":0.5,"place":0.1},"extra":{},"total":4.0}"#,
            "\n",
            r#"{"id":"c1","phases":{"rootfs":2.0,"cgroup":1.0,"agent":5.0},"extra":{"cgroup_made":2.5,"cgroup_cpu":0.3},"total":8.0}"#,
            "\n",
            r#"{"id":"x","phases":{"sandbox":3.0},"extra":{},"total":4.0}"#,
            "\n",
            r#"{"id":"c2","phases":{"cgr"#,
        );
        let recs = parse(text);
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert_eq!(recs[0].cgroup_made, None);
        assert_eq!(recs[1].cgroup_made, Some(2.5));
        assert_eq!((recs[1].cgroup, recs[1].total), (1.0, 8.0));
    }

    #[test]
    fn split_by_id_and_share_of_total() {
        let r = |id: &str, cg: f64, tot: f64, made: Option<f64>| Record {
            id: id.into(),
            cgroup: cg,
            total: tot,
            cgroup_made: made,
        };
        let sb: HashSet<String> = ["s1".into()].into();
        let ct: HashSet<String> = ["c1".into(), "c2".into()].into();
        let p = split(
            vec![
                r("s1", 1.0, 10.0, None),
                r("c1", 1.0, 4.0, Some(3.0)),
                r("c2", 3.0, 4.0, Some(5.0)),
                r("zz", 9.0, 9.0, None),
            ],
            &sb,
            &ct,
        );
        assert_eq!(p.foreign, 1);
        assert_eq!(p.sandbox.records.len(), 1);
        assert_eq!(p.sandbox.cgroup_made_median, None, "absent is no figure");
        assert_eq!(p.container.cgroup_share, Some(0.5));
        assert_eq!(p.container.cgroup_made_median, Some(4.0));
        assert_eq!(p.container.cgroup.map(|s| s.median), Some(2.0));
        // One record without the field: no median made up from the others.
        let p = split(
            vec![r("c1", 1.0, 4.0, Some(3.0)), r("c2", 1.0, 4.0, None)],
            &sb,
            &ct,
        );
        assert_eq!(p.container.cgroup_made_median, None);
    }
}
