//! Memory rows: per-pod RSS, PSS and anonymous memory under the concurrent load, and of idle pods.

use super::figures::{row, runs_of};
use crate::procfs::MemKind;
use crate::results::{Density, PollCost, Results, TableRow};
use crate::runtime::RuntimeKind;

const MIB: f64 = 1024.0;

/// Density at the largest N that has a measure for some runtime.
pub fn density_rows(results: &Results, rows: &mut Vec<TableRow>) {
    let dens = |k: RuntimeKind, n: usize| -> Option<Density> {
        let ds: Vec<&Density> = runs_of(results, k, n)
            .into_iter()
            .filter_map(|r| r.density.as_ref())
            .collect();
        // Pool the rounds: totals and pod counts add up.
        let mut acc = Density::default();
        for d in &ds {
            acc.add(d);
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
    for mk in MemKind::ALL {
        let kind = mk.label();
        let pp = |d: &Option<Density>| d.as_ref().and_then(|d| d.per_pod(mk));
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

/// Idle pods: shim, agent and inits apart, and the shim's threads.
pub fn idle_rows(results: &Results, rows: &mut Vec<TableRow>) {
    let get = |k: RuntimeKind| results.idle.get(k.label()).and_then(|s| s.density.as_ref());
    let (drd, drc) = (get(RuntimeKind::Rund), get(RuntimeKind::Runc));
    if drd.is_none() && drc.is_none() {
        return;
    }
    let pods = |d: Option<&Density>| d.map(|d| d.pods.to_string()).unwrap_or("-".into());
    let settle = results
        .idle
        .values()
        .map(|s| s.settle_ms)
        .max()
        .unwrap_or(0);
    let note = format!(
        "pods {} / {}, idle {:.0} s before the measure",
        pods(drd),
        pods(drc),
        settle as f64 / 1e3
    );
    for mk in MemKind::ALL {
        let kind = mk.label();
        let whole = |d: Option<&Density>| d.and_then(|d| d.per_pod(mk));
        // runc-v2 has no agent or inits: a dash, not a measured zero.
        let split = |d: Option<&Density>| {
            d.filter(|d| d.infra_processes > 0)
                .and_then(|d| d.per_pod_split(mk))
        };
        let mib = |v: Option<f64>| v.map(|v| v / MIB);
        let (a, b) = (whole(drd), whole(drc));
        rows.push(row(
            format!("idle pod {kind}: shim"),
            "MiB",
            mib(a.map(|t| t.0)),
            mib(b.map(|t| t.0)),
            true,
            note.clone(),
        ));
        rows.push(row(
            format!("idle pod {kind}: agent"),
            "MiB",
            mib(split(drd).map(|t| t.0)),
            mib(split(drc).map(|t| t.0)),
            false,
            String::new(),
        ));
        rows.push(row(
            format!("idle pod {kind}: container inits"),
            "MiB",
            mib(split(drd).map(|t| t.1)),
            mib(split(drc).map(|t| t.1)),
            false,
            String::new(),
        ));
        rows.push(row(
            format!("idle pod {kind}: shim + agent + inits (vs runc-v2 shim)"),
            "MiB",
            mib(a.map(|t| t.2)),
            mib(b.map(|t| t.0)),
            true,
            String::new(),
        ));
    }
    poll_rows(results, rows);
    let threads = |d: Option<&Density>| {
        d.filter(|d| d.shim_processes > 0)
            .map(|d| d.shim_threads as f64 / d.shim_processes as f64)
    };
    rows.push(row(
        "idle pod: shim threads".into(),
        "count",
        threads(drd),
        threads(drc),
        false,
        String::new(),
    ));
}

/// The idle shims' CPU time per State poll, one row per spacing.
fn poll_rows<'a>(results: &'a Results, rows: &mut Vec<TableRow>) {
    let costs = |k: RuntimeKind| results.idle.get(k.label()).map(|s| s.polls.as_slice());
    let (rd, rc) = (costs(RuntimeKind::Rund), costs(RuntimeKind::Runc));
    let mut gaps: Vec<u64> = [rd, rc]
        .into_iter()
        .flatten()
        .flatten()
        .map(|p| p.gap_ms)
        .collect();
    gaps.sort_unstable();
    gaps.dedup();
    for gap in gaps {
        let at = |c: Option<&'a [PollCost]>| -> Option<&'a PollCost> {
            c.and_then(|c| c.iter().find(|p| p.gap_ms == gap))
        };
        let (a, b) = (at(rd), at(rc));
        let part = |p: Option<&PollCost>| {
            p.map(|p| {
                let ended = if p.threads_ended > 0 {
                    format!(", {} threads ended uncounted", p.threads_ended)
                } else {
                    String::new()
                };
                format!("{} polls × {} shims{ended}", p.polls, p.shims)
            })
            .unwrap_or("-".into())
        };
        rows.push(row(
            format!("idle pod: shim CPU per State poll, polls {gap} ms apart"),
            "µs",
            a.and_then(|p| p.cpu_us_per_poll),
            b.and_then(|p| p.cpu_us_per_poll),
            true,
            format!("{} / {}", part(a), part(b)),
        ));
        let rss = |p: Option<&PollCost>| p.and_then(|p| p.rss_kib_after).map(|k| k / MIB);
        rows.push(row(
            format!("idle pod: shim RSS {gap} ms after polls {gap} ms apart"),
            "MiB",
            rss(a),
            rss(b),
            true,
            String::new(),
        ));
    }
}
