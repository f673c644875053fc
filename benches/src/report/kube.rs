//! Markdown for the Kubernetes-shaped study: one row per N and handler,
//! the rounds of a level pooled.

use std::fmt::Write as _;

use crate::measure::kube::phases::{PhaseSet, Record};
use crate::measure::kube::{KubeRun, KubeStudy};
use crate::stats::Summary;

const DASH: &str = "–";

/// One handler's runs at one N, pooled.
#[derive(Debug, Default)]
pub struct Level {
    pub pods: usize,
    pub failures: usize,
    pub start: Option<Summary>,
    pub wall_ms: Option<f64>,
    /// Σ over runs ÷ pods; `None` if any run was not traced.
    pub per_pod: Option<[f64; 3]>,
    pub dying_after: Option<i64>,
    pub dying_settled: Option<i64>,
    pub sandbox: Option<PhaseSet>,
    pub container: Option<PhaseSet>,
}

fn sum_opt(v: impl Iterator<Item = Option<i64>>) -> Option<i64> {
    v.sum()
}

pub fn level(runs: &[&KubeRun]) -> Level {
    let pods: usize = runs.iter().map(|r| r.pods).sum();
    let lat: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.latencies_ms.iter().copied())
        .collect();
    let walls: Vec<f64> = runs.iter().filter_map(|r| r.wall_ms).collect();
    let per_pod = runs
        .iter()
        .map(|r| r.ops.as_ref().map(|o| [o.mkdir, o.rmdir, o.rename]))
        .collect::<Option<Vec<_>>>()
        .filter(|_| pods > 0)
        .map(|v| {
            let t = v
                .iter()
                .fold([0u64; 3], |a, b| [a[0] + b[0], a[1] + b[1], a[2] + b[2]]);
            t.map(|x| x as f64 / pods as f64)
        });
    let phases = |pick: fn(&KubeRun) -> Option<&PhaseSet>| -> Option<PhaseSet> {
        let recs: Option<Vec<Vec<Record>>> = runs
            .iter()
            .map(|r| pick(r).map(|p| p.records.clone()))
            .collect();
        recs.map(|v| PhaseSet::of(v.concat()))
    };
    Level {
        pods,
        failures: runs.iter().map(|r| r.failures).sum(),
        start: Summary::of(&lat),
        // A burst's wall is a figure only when all its pods ran.
        wall_ms: Summary::of(&walls)
            .map(|s| s.median)
            .filter(|_| runs.iter().all(|r| r.n > 1)),
        per_pod,
        dying_after: sum_opt(runs.iter().map(|r| r.dying_delta(r.dying_after))),
        dying_settled: sum_opt(runs.iter().map(|r| r.dying_delta(r.dying_after_settle))),
        sandbox: phases(|r| r.phases.as_ref().map(|p| &p.sandbox)),
        container: phases(|r| r.phases.as_ref().map(|p| &p.container)),
    }
}

fn f(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| DASH.into())
}

fn share(p: &Option<PhaseSet>) -> String {
    match p {
        Some(p) => match (p.cgroup.map(|s| s.median), p.cgroup_share) {
            (Some(m), Some(s)) => format!("{m:.2} ({:.0}%)", s * 100.0),
            _ => DASH.into(),
        },
        None => DASH.into(),
    }
}

fn made(p: &Option<PhaseSet>) -> String {
    f(p.as_ref().and_then(|p| p.cgroup_made_median), 2)
}

pub fn render(study: &KubeStudy) -> String {
    let mut s = String::new();
    if !study.supported {
        let _ = writeln!(s, "not measured: {}", study.note);
        return s;
    }
    let _ = writeln!(
        s,
        "containerd {} with CRI; {}; each pod in its own cgroup under `{}` made by the bench \
         as the kubelet does; one busybox `sleep` per pod. Start = RunPodSandbox to \
         StartContainer returned. cgroup ops per pod from the kernel's tracepoints, inside the \
         pod cgroups, every hierarchy counted. Dying: added during the run, and {} s later. \
         cgroup phase: the median Create's `cgroup` phase of the app container (and of the \
         sandbox), with Σcgroup/Σtotal of those Creates.\n",
        study.containerd, study.layout, study.pod_parent, study.settle_s
    );
    s.push_str(
        "| N | handler | start median ms | p90 | wall ms | failed | mkdir/pod | rmdir/pod | \
         rename/pod | dying after | dying after settle | cgroup phase ms (share) | cgroup made ms \
         | sandbox cgroup ms (share) |\n",
    );
    s.push_str("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    let mut ns: Vec<usize> = study.runs.iter().map(|r| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    for n in ns {
        for h in &study.handlers {
            let runs: Vec<&KubeRun> = study
                .runs
                .iter()
                .filter(|r| r.n == n && r.handler == h.name)
                .collect();
            if h.skipped.is_some() || runs.is_empty() {
                continue;
            }
            let l = level(&runs);
            let ops = |i: usize| f(l.per_pod.map(|p| p[i]), 1);
            let _ = writeln!(
                s,
                "| {n} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} |",
                h.label,
                f(l.start.map(|x| x.median), 0),
                f(l.start.map(|x| x.p90), 0),
                f(l.wall_ms, 0),
                l.failures,
                l.pods,
                ops(0),
                ops(1),
                ops(2),
                f(l.dying_after.map(|x| x as f64), 0),
                f(l.dying_settled.map(|x| x as f64), 0),
                share(&l.container),
                made(&l.container),
                share(&l.sandbox),
            );
        }
    }
    notes(&mut s, study);
    s
}

fn notes(s: &mut String, study: &KubeStudy) {
    let _ = writeln!(s, "\n- cgroup ops: {}", study.trace);
    let _ = writeln!(s, "- dying cgroups: {}", study.dying_method);
    let mut bench = [0u64; 2];
    let (mut above, mut other, mut lost) = (0, 0, 0);
    for o in study.runs.iter().filter_map(|r| r.ops.as_ref()) {
        bench[0] += o.bench_mkdir;
        bench[1] += o.bench_rmdir;
        above += o.above_pods;
        other += o.other_runs;
        lost += o.lost;
    }
    let _ = writeln!(
        s,
        "- the bench's own pod cgroup mkdir/rmdir (not in the table): {} / {}; runtime work above \
         the pod cgroups: {above}; late work in earlier runs' pods: {other}; events lost: {lost}",
        bench[0], bench[1]
    );
    for h in &study.handlers {
        if let Some(why) = &h.skipped {
            let _ = writeln!(s, "- {} skipped: {why}", h.label);
        }
    }
    for r in &study.runs {
        let label = study
            .handlers
            .iter()
            .find(|h| h.name == r.handler)
            .map_or(r.handler.as_str(), |h| h.label);
        if r.teardown_failures + r.rmdir_failures > 0 {
            let _ = writeln!(
                s,
                "- {label} N={} round {}: {} teardown failure(s), {} pod cgroup(s) not removable",
                r.n, r.round, r.teardown_failures, r.rmdir_failures
            );
        }
        for e in &r.errors {
            let _ = writeln!(s, "- {label} N={} round {}: {e}", r.n, r.round);
        }
        if let Some(p) = r.phases.as_ref().filter(|p| p.foreign > 0) {
            let _ = writeln!(
                s,
                "- {label} N={}: {} phase record(s) of no pod of the run",
                r.n, p.foreign
            );
        }
    }
    for e in &study.cleanup_errors {
        let _ = writeln!(s, "- left after clean-up: {e}");
    }
    if !study.note.is_empty() {
        let _ = writeln!(s, "- note: {}", study.note);
    }
    if !study.log.is_empty() {
        let _ = writeln!(s, "- {}", study.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::kube::handlers::Handler;
    use crate::measure::kube::ops::OpCounts;

    fn run(n: usize, lat: &[f64], mkdir: u64, dying: (i64, i64, i64)) -> KubeRun {
        KubeRun {
            handler: "runc".into(),
            n,
            pods: lat.len(),
            latencies_ms: lat.to_vec(),
            wall_ms: (n > 1).then_some(100.0),
            ops: Some(OpCounts {
                mkdir,
                rmdir: mkdir,
                ..Default::default()
            }),
            dying_before: Some(dying.0),
            dying_after: Some(dying.1),
            dying_after_settle: Some(dying.2),
            ..Default::default()
        }
    }

    #[test]
    fn rounds_pool_and_untraced_runs_give_no_op_figure() {
        let a = run(1, &[10.0, 20.0], 18, (100, 104, 101));
        let b = run(1, &[30.0, 40.0], 18, (101, 103, 101));
        let l = level(&[&a, &b]);
        assert_eq!(l.pods, 4);
        assert_eq!(l.per_pod, Some([9.0, 9.0, 0.0]));
        assert_eq!((l.dying_after, l.dying_settled), (Some(6), Some(1)));
        assert_eq!(l.start.map(|s| s.median), Some(25.0));
        assert_eq!(l.wall_ms, None, "N = 1 has no wall");
        let mut c = b.clone();
        c.ops = None;
        c.dying_before = None;
        let l = level(&[&a, &c]);
        assert_eq!((l.per_pod, l.dying_after), (None, None));
    }

    #[test]
    fn skipped_handlers_have_no_row_but_a_note() {
        let study = KubeStudy {
            supported: true,
            handlers: vec![
                Handler {
                    name: "runc",
                    label: "runc-v2",
                    config: None,
                    phases: None,
                    skipped: None,
                },
                Handler {
                    name: "rund-nopool",
                    label: "rund pool off",
                    config: Some("/x".into()),
                    phases: Some("/p".into()),
                    skipped: Some("not honoured".into()),
                },
            ],
            runs: vec![run(50, &[5.0; 4], 8, (0, 0, 0))],
            ..Default::default()
        };
        let out = render(&study);
        let row = out
            .lines()
            .find(|l| l.starts_with("| 50 | runc-v2"))
            .unwrap();
        assert!(
            row.contains("| 0/4 | 2.0 | 2.0 | 0.0 | 0 | 0 | – | – | – |"),
            "{row}"
        );
        assert!(!out.contains("| 50 | rund pool off"), "{out}");
        assert!(
            out.contains("- rund pool off skipped: not honoured"),
            "{out}"
        );
    }
}
