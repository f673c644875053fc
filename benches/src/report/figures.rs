//! The comparison rows: one figure per row, rund and runc-v2 side by side.

use crate::results::{Client, ConcurrentRun, Results, TableRow};
use crate::runtime::RuntimeKind;
use crate::stats::{percentile_sorted, ratio, Summary};

pub(super) fn row(
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
        floor: None,
        note,
    }
}

fn with_floor(mut r: TableRow, floor: Option<f64>) -> TableRow {
    r.floor = floor;
    r
}

/// A figure less the floor's: the part each runtime adds to containerd + ctr.
fn above_floor(figure: String, unit: &str, base: &TableRow) -> Option<TableRow> {
    let f = base.floor?;
    let less = |v: Option<f64>| v.map(|v| v - f);
    let (a, b) = (less(base.rund), less(base.runc));
    // Below the floor is noise (the floor was measured at another moment):
    // no ratio of a negative.
    let positive = a.is_some_and(|a| a > 0.0) && b.is_some_and(|b| b > 0.0);
    Some(row(
        figure,
        unit,
        a,
        b,
        positive,
        "figure less the floor (no-op shim)".into(),
    ))
}

/// Runs of one runtime at one N in the main comparison (not feature runs),
/// through `client`.
pub fn runs_via(
    results: &Results,
    client: Client,
    kind: RuntimeKind,
    n: usize,
) -> Vec<&ConcurrentRun> {
    results
        .concurrent
        .iter()
        .filter(|r| r.runtime == kind && r.n == n && r.variant.is_none() && r.client == client)
        .collect()
}

/// Runs of one runtime at one N in the main comparison through `ctr`.
pub fn runs_of(results: &Results, kind: RuntimeKind, n: usize) -> Vec<&ConcurrentRun> {
    runs_via(results, Client::Ctr, kind, n)
}

/// A figure's name through `client`: the `ctr` ones keep their plain names.
pub fn via(client: Client, name: String) -> String {
    match client {
        Client::Ctr => name,
        Client::Api => format!("API: {name}"),
    }
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
    for client in [Client::Ctr, Client::Api] {
        single_rows(results, client, &mut rows);
        concurrent_rows(results, client, &mut rows);
    }
    super::cpu::rows(results, &mut rows);
    super::memory::density_rows(results, &mut rows);
    super::memory::idle_rows(results, &mut rows);
    super::node::rows(results, &mut rows);
    stop_rows(results, &mut rows);
    rows
}

fn single_rows(results: &Results, client: Client, rows: &mut Vec<TableRow>) {
    let starts = match client {
        Client::Ctr => &results.single_start,
        Client::Api => &results.api_single_start,
    };
    let get = |k: RuntimeKind| starts.get(k.label());
    let single =
        |k: RuntimeKind, f: fn(&Summary) -> f64| get(k).and_then(|s| s.summary.as_ref()).map(f);
    let fails = |k: RuntimeKind| get(k).map(|s| s.failures as f64);
    if !starts.is_empty() {
        let n = |k: RuntimeKind| get(k).map(|s| s.samples_ms.len()).unwrap_or(0);
        let note = format!("n = {} / {}", n(RuntimeKind::Rund), n(RuntimeKind::Runc));
        let mut median_row = None;
        for (name, f) in [
            ("median", (|s: &Summary| s.median) as fn(&Summary) -> f64),
            ("p90", |s| s.p90),
            ("p99", |s| s.p99),
        ] {
            let r = with_floor(
                row(
                    via(
                        client,
                        format!("single start (`run --rm /bin/true`) {name}"),
                    ),
                    "ms",
                    single(RuntimeKind::Rund, f),
                    single(RuntimeKind::Runc, f),
                    true,
                    note.clone(),
                ),
                single(RuntimeKind::Noop, f),
            );
            median_row.get_or_insert_with(|| r.clone());
            rows.push(r);
        }
        rows.push(with_floor(
            row(
                via(client, "single start failures".into()),
                "count",
                fails(RuntimeKind::Rund),
                fails(RuntimeKind::Runc),
                false,
                String::new(),
            ),
            fails(RuntimeKind::Noop),
        ));
        let name = via(client, "single start median above the floor".into());
        if let Some(r) = median_row.and_then(|m| above_floor(name, "ms", &m)) {
            rows.push(r);
        }
    }
}

fn concurrent_rows(results: &Results, client: Client, rows: &mut Vec<TableRow>) {
    for n in &results.meta.concurrency {
        let rd = runs_via(results, client, RuntimeKind::Rund, *n);
        let rc = runs_via(results, client, RuntimeKind::Runc, *n);
        let rf = runs_via(results, client, RuntimeKind::Noop, *n);
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
        let mut rounds = format!(
            "rounds without failures {}/{} / {}/{}",
            clean(&rd).len(),
            rd.len(),
            clean(&rc).len(),
            rc.len()
        );
        if rd.len().max(rc.len()).max(rf.len()) > 1 {
            rounds.push_str(&format!(
                "; each round (s): {}",
                round_walls(&[("rund", &rd), ("runc-v2", &rc), ("floor", &rf)])
            ));
        }
        let wall_row = with_floor(
            row(
                via(client, format!("{n} concurrent: wall until all running")),
                "s",
                wall(&rd),
                wall(&rc),
                true,
                rounds,
            ),
            wall(&rf),
        );
        rows.push(wall_row.clone());
        rows.push(with_floor(
            row(
                via(client, format!("{n} concurrent: failures")),
                "count",
                failures(&rd),
                failures(&rc),
                false,
                String::new(),
            ),
            failures(&rf),
        ));
        if let Some(r) = above_floor(
            via(client, format!("{n} concurrent: wall above the floor")),
            "s",
            &wall_row,
        ) {
            rows.push(r);
        }
        for (name, p) in [("p50", 50.0), ("p99", 99.0)] {
            rows.push(with_floor(
                row(
                    via(client, format!("{n} concurrent: per-container {name}")),
                    "ms",
                    pooled_latency(&rd, p),
                    pooled_latency(&rc, p),
                    true,
                    String::new(),
                ),
                pooled_latency(&rf, p),
            ));
        }
        rows.push(with_floor(
            row(
                via(client, format!("{n} teardown: kill+delete wall")),
                "s",
                td(&rd),
                td(&rc),
                true,
                String::new(),
            ),
            td(&rf),
        ));
        rows.push(with_floor(
            row(
                via(client, format!("{n} teardown: failures")),
                "count",
                td_fail(&rd),
                td_fail(&rc),
                false,
                String::new(),
            ),
            td_fail(&rf),
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

/// "rund 0.62 0.58 0.71, runc-v2 …": each round's wall in run order, "fail"
/// for a round with failures.
fn round_walls(sets: &[(&str, &[&ConcurrentRun])]) -> String {
    sets.iter()
        .filter(|(_, runs)| !runs.is_empty())
        .map(|(name, runs)| {
            let walls: Vec<String> = runs
                .iter()
                .map(|r| {
                    if r.failures == 0 {
                        format!("{:.2}", r.wall_ms / 1e3)
                    } else {
                        "fail".into()
                    }
                })
                .collect();
            format!("{name} {}", walls.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn above_floor_takes_the_floor_off_both_runtimes() {
        let base = with_floor(
            row(
                "x".into(),
                "ms",
                Some(90.0),
                Some(140.0),
                true,
                String::new(),
            ),
            Some(60.0),
        );
        let r = above_floor("y".into(), "ms", &base).unwrap();
        assert_eq!((r.rund, r.runc), (Some(30.0), Some(80.0)));
        assert!((r.ratio.unwrap() - 0.375).abs() < 1e-9);
        let no_floor = row("x".into(), "ms", Some(1.0), Some(2.0), true, String::new());
        assert!(above_floor("y".into(), "ms", &no_floor).is_none());
        let below = with_floor(
            row("x".into(), "s", Some(2.5), Some(5.5), true, String::new()),
            Some(3.0),
        );
        assert_eq!(above_floor("y".into(), "s", &below).unwrap().ratio, None);
    }

    pub(crate) fn burst(
        runtime: RuntimeKind,
        round: usize,
        wall_ms: f64,
        failures: usize,
    ) -> ConcurrentRun {
        ConcurrentRun {
            runtime,
            variant: None,
            client: Client::Ctr,
            n: 200,
            round,
            wall_ms,
            started: 200 - failures,
            running: 200 - failures,
            errors: Vec::new(),
            failures,
            latencies_ms: Vec::new(),
            latency: None,
            density: None,
            teardown: None,
            cpu_start: None,
            cpu_teardown: None,
        }
    }

    #[test]
    fn round_walls_lists_each_round_in_order_and_marks_failed_ones() {
        let rd = [
            burst(RuntimeKind::Rund, 0, 2630.0, 0),
            burst(RuntimeKind::Rund, 1, 1960.4, 0),
            burst(RuntimeKind::Rund, 2, 2100.0, 3),
        ];
        let rc = [burst(RuntimeKind::Runc, 0, 7760.0, 0)];
        let (rd, rc): (Vec<&ConcurrentRun>, Vec<&ConcurrentRun>) =
            (rd.iter().collect(), rc.iter().collect());
        assert_eq!(
            round_walls(&[("rund", &rd), ("runc-v2", &rc), ("floor", &[])]),
            "rund 2.63 1.96 fail, runc-v2 7.76"
        );
    }
}
