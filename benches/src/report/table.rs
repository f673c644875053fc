//! Markdown rendering of the comparison rows and the feature switches.

use std::fmt::Write as _;

use crate::results::{ConcurrentRun, CriStudy, FeatureResult, Results, TableRow};
use crate::runtime::RuntimeKind;
use crate::stats::{ratio, Summary};

fn fmt_val(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "—".into(),
        Some(x) if unit == "count" => format!("{x:.0}"),
        Some(x) if unit == "ms" => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into())
}

fn bound(at_least: bool, v: String) -> String {
    if at_least && v != "—" {
        format!("≥ {v}")
    } else {
        v
    }
}

/// A lower-bound denominator makes the ratio an upper bound; a lower-bound
/// numerator makes it meaningless.
fn fmt_row_ratio(r: &TableRow) -> String {
    match (r.rund_at_least, r.runc_at_least, r.ratio) {
        (true, _, Some(_)) => "—".into(),
        (false, true, Some(x)) => format!("≤ {x:.2}×"),
        _ => fmt_ratio(r.ratio),
    }
}

pub fn render_rows(rows: &[TableRow]) -> String {
    let mut s = String::from(
        "| figure | unit | rund | runc-v2 | rund/runc-v2 | floor | note |\n\
         |---|---|--:|--:|--:|--:|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.figure,
            r.unit,
            bound(r.rund_at_least, fmt_val(r.rund, &r.unit)),
            bound(r.runc_at_least, fmt_val(r.runc, &r.unit)),
            fmt_row_ratio(r),
            fmt_val(r.floor, &r.unit),
            r.note
        );
    }
    s
}

fn median(s: &crate::results::SampleSet) -> Option<f64> {
    s.summary.as_ref().map(|s: &Summary| s.median)
}

/// runc-v2's figures from the main comparison of the same run: the single
/// start median (ms) and the all-running wall (s) by N.
pub struct RuncRef {
    pub single_ms: Option<f64>,
    pub wall_s: std::collections::BTreeMap<usize, f64>,
}

impl RuncRef {
    pub fn of(results: &Results) -> RuncRef {
        let single_ms = results
            .single_start
            .get(RuntimeKind::Runc.label())
            .and_then(|s| s.summary.as_ref())
            .map(|x| x.median);
        let mut wall_s = std::collections::BTreeMap::new();
        for r in &results.concurrent {
            if r.runtime == RuntimeKind::Runc
                && r.variant.is_none()
                && r.client == crate::results::Client::Ctr
                && r.failures == 0
            {
                wall_s.entry(r.n).or_insert(r.wall_ms / 1e3);
            }
        }
        RuncRef { single_ms, wall_s }
    }
}

pub fn render_features(features: &[FeatureResult], runc: &RuncRef) -> String {
    let mut s = String::from(
        "| rund switch | figure | A | B | A/B | A/runc-v2 | note |\n|---|---|--:|--:|--:|--:|---|\n",
    );
    for f in features {
        let [a, b] = &f.variants;
        if !f.supported {
            let _ = writeln!(
                s,
                "| {} {a} vs {b} | — | — | — | — | — | {} |",
                f.feature, f.note
            );
            continue;
        }
        let (ma, mb) = (median(&f.single_start[0]), median(&f.single_start[1]));
        let _ = writeln!(
            s,
            "| {} {a} vs {b} | single start median (ms) | {} | {} | {} | {} | failures {} / {}; {} |",
            f.feature,
            fmt_val(ma, "ms"),
            fmt_val(mb, "ms"),
            fmt_ratio(ratio(ma, mb)),
            fmt_ratio(ratio(ma, runc.single_ms)),
            f.single_start[0].failures,
            f.single_start[1].failures,
            f.note
        );
        for (ra, rb) in f.concurrent[0].iter().zip(&f.concurrent[1]) {
            // Only a run with every container RUNNING has an "all running" wall time.
            let wall = |r: &ConcurrentRun| (r.failures == 0).then(|| r.wall_ms / 1e3);
            let (wa, wb) = (wall(ra), wall(rb));
            let _ = writeln!(
                s,
                "| {} {a} vs {b} | {} concurrent wall (s) | {} | {} | {} | {} | failures {} / {} |",
                f.feature,
                ra.n,
                fmt_val(wa, "s"),
                fmt_val(wb, "s"),
                fmt_ratio(ratio(wa, wb)),
                fmt_ratio(ratio(wa, runc.wall_s.get(&ra.n).copied())),
                ra.failures,
                rb.failures
            );
        }
    }
    s
}

pub fn render_cri(c: &CriStudy) -> String {
    if !c.supported {
        return format!("{}\n", c.note);
    }
    let mut s = format!(
        "containerd {}; one pod per sample after one warm-up pod per handler, handlers \
         rotated; stop and removal not timed.\n\n\
         | handler | what | median (ms) | p90 (ms) | n | failures |\n|---|---|--:|--:|--:|--:|\n",
        c.containerd
    );
    for (h, set) in &c.run_pod_sandbox {
        let sum = set.summary.as_ref();
        let _ = writeln!(
            s,
            "| {h} | {} | {} | {} | {} | {} |",
            c.handlers.get(h).map(String::as_str).unwrap_or(""),
            fmt_val(sum.map(|x| x.median), "ms"),
            fmt_val(sum.map(|x| x.p90), "ms"),
            set.samples_ms.len(),
            set.failures
        );
    }
    s.push_str(&render_own(c));
    for (h, set) in c.warmup.iter().chain(&c.run_pod_sandbox) {
        for e in &set.errors {
            let _ = writeln!(s, "\n- {h}: {e}");
        }
    }
    if c.teardown_failures > 0 {
        let _ = writeln!(
            s,
            "\n- {} pod(s) failed to stop or be removed",
            c.teardown_failures
        );
    }
    if !c.log.is_empty() {
        let _ = writeln!(s, "\n- {}", c.log);
    }
    s
}

/// rund's own part of RunPodSandbox: the shim's Create of the pod's sandbox,
/// with its phases (medians).
fn render_own(c: &CriStudy) -> String {
    if c.own.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nrund's own time: the shim's Create of the pod's sandbox (`[trace] phases_file`), \
         medians; the rest of RunPodSandbox is containerd's, CNI's and the `start` exec.\n\n\
         | handler | shim Create (ms) | p90 (ms) | phases (median ms) | warm claims | n |\n\
         |---|--:|--:|---|--:|--:|\n",
    );
    for (h, own) in &c.own {
        let sum = own.create.summary.as_ref();
        let phases: Vec<String> = own
            .phases
            .iter()
            .filter_map(|(k, v)| Summary::of(v).map(|x| format!("{k} {:.2}", x.median)))
            .collect();
        let _ = writeln!(
            s,
            "| {h} | {} | {} | {} | {} | {}{} |",
            fmt_val(sum.map(|x| x.median), "ms"),
            fmt_val(sum.map(|x| x.p90), "ms"),
            phases.join(", "),
            own.warm_claims,
            own.create.samples_ms.len(),
            if own.missing > 0 {
                format!(" ({} without a record)", own.missing)
            } else {
                String::new()
            }
        );
    }
    s
}

/// The whole stdout report.
pub fn render(results: &Results) -> String {
    let m = &results.meta;
    let mut s = format!(
        "## rund vs runc-v2 ({} mode)\n\n{} CPUs, kernel {}, {}, {}; {} single-start samples per runtime \
         after {} warm-up, concurrency {:?} × {} round(s); run took {:.0} s.\n\n",
        if m.quick { "quick" } else { "full" },
        m.cpus,
        m.kernel,
        m.containerd,
        m.runc,
        m.iterations,
        m.warmup,
        m.concurrency,
        m.rounds,
        m.duration_s
    );
    s.push_str(&render_rows(&results.table));
    if results.table.iter().any(|r| r.floor.is_some()) {
        s.push_str(
            "\nfloor: the bench's no-op shim (`containerd-shim-rundbench-noop-v2`: no process, \
         events only) in the same alternation: containerd + ctr + one shim process start.\n",
        );
    }
    if results.table.iter().any(|r| r.figure.starts_with("API: ")) {
        s.push_str(
            "\nAPI: the same starts through containerd's client API (gRPC, one connection \
             for the whole run, as the CRI plugin's callers hold one), instead of a `ctr` \
             process per operation: each pod's container is the one `ctr run` makes (read \
             back from a template container), with null IO and no lease.\n",
        );
    }
    if let Some(t) = super::cpu::render(results) {
        s.push_str("\n### CPU per pod, by who spends it\n\n");
        s.push_str(&t);
    }
    if let Some(c) = &results.cri {
        s.push_str("\n### CRI RunPodSandbox (containerd 2.1, pod network)\n\n");
        s.push_str(&render_cri(c));
    }
    if !results.features.is_empty() {
        s.push_str("\n### rund feature switches\n\n");
        s.push_str(&render_features(&results.features, &RuncRef::of(results)));
    }
    if let Some(p) = &results.pool {
        s.push_str("\n### cgroup pool: on against off\n\n");
        s.push_str(&super::pool::render(p));
    }
    if let Some(k) = &results.kube {
        s.push_str("\n### Kubernetes-shaped pods (CRI, a cgroup per pod)\n\n");
        s.push_str(&super::kube::render(k));
    }
    if let Some(n) = &results.node {
        s.push_str("\n### rund per-node against per-pod mode (idle pods)\n\n");
        s.push_str(&super::node::render(n));
    }
    if !results.notes.is_empty() {
        s.push_str("\n### notes\n\n");
        for n in &results.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_values_are_dashes_not_zeroes() {
        let rows = [TableRow {
            figure: "x".into(),
            unit: "ms".into(),
            rund: None,
            runc: Some(12.345),
            ratio: None,
            rund_at_least: false,
            runc_at_least: false,
            floor: None,
            note: String::new(),
        }];
        let t = render_rows(&rows);
        assert!(t.contains("| x | ms | — | 12.3 | — | — |"), "{t}");
    }

    #[test]
    fn capped_values_are_bounds() {
        let mut r = TableRow {
            figure: "stop".into(),
            unit: "s".into(),
            rund: Some(0.2),
            runc: Some(10.0),
            ratio: Some(0.02),
            rund_at_least: false,
            runc_at_least: true,
            floor: Some(0.05),
            note: String::new(),
        };
        let t = render_rows(std::slice::from_ref(&r));
        assert!(t.contains("| 0.20 | ≥ 10.00 | ≤ 0.02× | 0.05 |"), "{t}");
        r.rund_at_least = true;
        assert!(render_rows(&[r]).contains("| ≥ 0.20 | ≥ 10.00 | — |"));
    }

    #[test]
    fn ratio_is_formatted() {
        assert_eq!(fmt_ratio(Some(0.3456)), "0.35×");
        assert_eq!(fmt_val(Some(3.0), "count"), "3");
    }
}
