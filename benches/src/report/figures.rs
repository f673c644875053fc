//! The comparison rows: one figure per row, rund and runc-v2 side by side.

use crate::results::{ConcurrentRun, Density, Results, TableRow};
use crate::runtime::RuntimeKind;
use crate::stats::{percentile_sorted, ratio, Summary};

const MIB: f64 = 1024.0;

fn row(
    figure: String,
    unit: &str,
    rund: Option<f64>,
    runc: Option<f64>,
    ratio_ok: bool,
    note: String,
) -> TableRow {
    TableRow {
        figure,
        unit: unit.into(),
        rund,
        runc,
        ratio: if ratio_ok { ratio(rund, runc) } else { None },
        rund_at_least: false,
        runc_at_least: false,
        note,
    }
}

/// Runs of one runtime at one N in the main comparison (not feature runs).
pub fn runs_of(results: &Results, kind: RuntimeKind, n: usize) -> Vec<&ConcurrentRun> {
    results
        .concurrent
        .iter()
        .filter(|r| r.runtime == kind && r.n == n && r.variant.is_none())
        .collect()
}

/// Median over rounds of a per-run figure.
fn median_of(v: Vec<f64>) -> Option<f64> {
    Summary::of(&v).map(|s| s.median)
}

fn pooled_latency(runs: &[&ConcurrentRun], p: f64) -> Option<f64> {
    let mut all: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.latencies_ms.iter().copied())
        .collect();
    if all.is_empty() {
        return None;
    }
    all.sort_by(f64::total_cmp);
    Some(percentile_sorted(&all, p))
}

pub fn build(results: &Results) -> Vec<TableRow> {
    let mut rows = Vec::new();
    let get = |k: RuntimeKind| results.single_start.get(k.label());
    let single =
        |k: RuntimeKind, f: fn(&Summary) -> f64| get(k).and_then(|s| s.summary.as_ref()).map(f);
    let fails = |k: RuntimeKind| get(k).map(|s| s.failures as f64);
    if !results.single_start.is_empty() {
        let n = |k: RuntimeKind| get(k).map(|s| s.samples_ms.len()).unwrap_or(0);
        let note = format!("n = {} / {}", n(RuntimeKind::Rund), n(RuntimeKind::Runc));
        for (name, f) in [
            ("median", (|s: &Summary| s.median) as fn(&Summary) -> f64),
            ("p90", |s| s.p90),
            ("p99", |s| s.p99),
        ] {
            rows.push(row(
                format!("single start (`run --rm /bin/true`) {name}"),
                "ms",
                single(RuntimeKind::Rund, f),
                single(RuntimeKind::Runc, f),
                true,
                note.clone(),
            ));
        }
        rows.push(row(
            "single start failures".into(),
            "count",
            fails(RuntimeKind::Rund),
            fails(RuntimeKind::Runc),
            false,
            String::new(),
        ));
    }

    for n in &results.meta.concurrency {
        let rd = runs_of(results, RuntimeKind::Rund, *n);
        let rc = runs_of(results, RuntimeKind::Runc, *n);
        if rd.is_empty() && rc.is_empty() {
            continue;
        }
        // Wall and teardown times mean "all N" only for runs without failures.
        let clean = |r: &[&ConcurrentRun]| -> Vec<f64> {
            r.iter()
                .filter(|x| x.failures == 0)
                .map(|x| x.wall_ms / 1e3)
                .collect()
        };
        let wall = |r: &[&ConcurrentRun]| median_of(clean(r));
        let failures = |r: &[&ConcurrentRun]| {
            (!r.is_empty()).then(|| r.iter().map(|x| x.failures as f64).sum())
        };
        let td = |r: &[&ConcurrentRun]| {
            median_of(
                r.iter()
                    .filter(|x| x.failures == 0)
                    .filter_map(|x| x.teardown.as_ref())
                    .map(|t| t.wall_ms / 1e3)
                    .collect(),
            )
        };
        let td_fail = |r: &[&ConcurrentRun]| {
            (!r.is_empty()).then(|| {
                r.iter()
                    .filter_map(|x| x.teardown.as_ref())
                    .map(|t| t.failures as f64)
                    .sum()
            })
        };
        let rounds = format!(
            "rounds without failures {}/{} / {}/{}",
            clean(&rd).len(),
            rd.len(),
            clean(&rc).len(),
            rc.len()
        );
        rows.push(row(
            format!("{n} concurrent: wall until all running"),
            "s",
            wall(&rd),
            wall(&rc),
            true,
            rounds,
        ));
        rows.push(row(
            format!("{n} concurrent: failures"),
            "count",
            failures(&rd),
            failures(&rc),
            false,
            String::new(),
        ));
        for (name, p) in [("p50", 50.0), ("p99", 99.0)] {
            rows.push(row(
                format!("{n} concurrent: per-container {name}"),
                "ms",
                pooled_latency(&rd, p),
                pooled_latency(&rc, p),
                true,
                String::new(),
            ));
        }
        rows.push(row(
            format!("{n} teardown: kill+delete wall"),
            "s",
            td(&rd),
            td(&rc),
            true,
            String::new(),
        ));
        rows.push(row(
            format!("{n} teardown: failures"),
            "count",
            td_fail(&rd),
            td_fail(&rc),
            false,
            String::new(),
        ));
    }

    density_rows(results, &mut rows);
    stop_rows(results, &mut rows);
    rows
}

/// Density at the largest N that has a measure for some runtime.
fn density_rows(results: &Results, rows: &mut Vec<TableRow>) {
    let dens = |k: RuntimeKind, n: usize| -> Option<Density> {
        let ds: Vec<&Density> = runs_of(results, k, n)
            .into_iter()
            .filter_map(|r| r.density.as_ref())
            .collect();
        // Pool the rounds: totals and pod counts add up.
        let mut acc = Density::default();
        for d in &ds {
            acc.pods += d.pods;
            acc.unresolved += d.unresolved;
            acc.shim_total += d.shim_total;
            acc.infra_total += d.infra_total;
        }
        (!ds.is_empty()).then_some(acc)
    };
    let Some(&n) = results
        .meta
        .concurrency
        .iter()
        .filter(|&&n| dens(RuntimeKind::Rund, n).is_some() || dens(RuntimeKind::Runc, n).is_some())
        .max()
    else {
        return;
    };
    let (drd, drc) = (dens(RuntimeKind::Rund, n), dens(RuntimeKind::Runc, n));
    let pods = |d: &Option<Density>| {
        d.as_ref()
            .map(|d| format!("{}", d.pods))
            .unwrap_or("-".into())
    };
    let note = format!("N = {n}, pods found {} / {}", pods(&drd), pods(&drc));
    for pss in [false, true] {
        let kind = if pss { "PSS" } else { "RSS" };
        let pp = |d: &Option<Density>| d.as_ref().and_then(|d| d.per_pod(pss));
        let (a, b) = (pp(&drd), pp(&drc));
        let mib = |v: Option<(f64, f64, f64)>, f: fn((f64, f64, f64)) -> f64| v.map(|t| f(t) / MIB);
        rows.push(row(
            format!("per-pod {kind}: shim"),
            "MiB",
            mib(a, |t| t.0),
            mib(b, |t| t.0),
            true,
            note.clone(),
        ));
        rows.push(row(
            format!("per-pod {kind}: agent + inits"),
            "MiB",
            mib(a, |t| t.1),
            mib(b, |t| t.1),
            false,
            String::new(),
        ));
        rows.push(row(
            format!("per-pod {kind}: shim + agent + inits (vs runc-v2 shim)"),
            "MiB",
            mib(a, |t| t.2),
            mib(b, |t| t.0),
            true,
            String::new(),
        ));
    }
}

fn stop_rows(results: &Results, rows: &mut Vec<TableRow>) {
    if results.stop.is_empty() {
        return;
    }
    let get = |k: RuntimeKind| results.stop.get(k.label());
    let med = |k: RuntimeKind| {
        get(k)
            .and_then(|s| s.summary.as_ref())
            .map(|s| s.median / 1e3)
    };
    let mut notes = Vec::new();
    for k in [RuntimeKind::Rund, RuntimeKind::Runc] {
        if let Some(s) = get(k) {
            if s.capped_count() > 0 {
                notes.push(format!(
                    "{}: {}/{} capped at {} s, then KILL (true value ≥ cap)",
                    k.label(),
                    s.capped_count(),
                    s.samples_ms.len(),
                    results.meta.stop_cap_s
                ));
            }
        }
    }
    // The median is a lower bound when at least half the samples hit the cap.
    let at_least =
        |k: RuntimeKind| get(k).is_some_and(|s| 2 * s.capped_count() >= s.samples_ms.len().max(1));
    let mut r = row(
        "stop latency: TERM to exit, `sh -c 'sleep 1000 & wait'` (median)".into(),
        "s",
        med(RuntimeKind::Rund),
        med(RuntimeKind::Runc),
        true,
        notes.join("; "),
    );
    r.rund_at_least = at_least(RuntimeKind::Rund);
    r.runc_at_least = at_least(RuntimeKind::Runc);
    rows.push(r);
    let fails = |k: RuntimeKind| get(k).map(|s| s.failures as f64);
    rows.push(row(
        "stop latency: failures".into(),
        "count",
        fails(RuntimeKind::Rund),
        fails(RuntimeKind::Runc),
        false,
        String::new(),
    ));
}
