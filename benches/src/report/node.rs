//! The per-node study: per-pod memory of N idle pods, rund per-node and
//! per-pod mode against runc-v2.

use std::fmt::Write;

use super::figures::row;
use crate::measure::node::{PER_NODE, PER_POD, RUNC};
use crate::procfs::MemKind;
use crate::results::{NodeStudy, Results, TableRow};

const MIB: f64 = 1024.0;

fn find<'a>(s: &'a NodeStudy, n: usize, handler: &str) -> Option<&'a crate::results::IdleSet> {
    s.rows
        .iter()
        .find(|r| r.pods == n && r.handler == handler)
        .map(|r| &r.set)
}

/// Per-pod MiB (shim share, agent + inits, total) of one handler at N.
fn per_pod(s: &NodeStudy, n: usize, handler: &str, kind: MemKind) -> Option<(f64, f64, f64)> {
    find(s, n, handler)?
        .density
        .as_ref()?
        .per_pod(kind)
        .map(|(a, b, c)| (a / MIB, b / MIB, c / MIB))
}

/// Main-table rows: everything rund spends per pod against runc-v2's shim.
pub fn rows(results: &Results, rows: &mut Vec<TableRow>) {
    let Some(s) = &results.node else { return };
    let mut sizes: Vec<usize> = s.rows.iter().map(|r| r.pods).collect();
    sizes.dedup();
    for n in sizes {
        for kind in [MemKind::Rss, MemKind::Pss] {
            let runc = per_pod(s, n, RUNC, kind).map(|t| t.0);
            for (handler, what) in [
                (PER_POD, "shim + agent + inits"),
                (PER_NODE, "share of the node's shim + agent + inits"),
            ] {
                rows.push(row(
                    format!(
                        "{n} idle pods, {handler}: per-pod {} ({what})",
                        kind.label()
                    ),
                    "MiB",
                    per_pod(s, n, handler, kind).map(|t| t.2),
                    runc,
                    true,
                    "runc-v2: its shim per pod".into(),
                ));
            }
        }
    }
}

/// The study's own table.
pub fn render(s: &NodeStudy) -> String {
    let mut out = String::from(
        "| N | handler | pods found | shim processes | failed | per-pod RSS MiB: shim | agent + inits | total | per-pod PSS MiB total |\n\
         |--:|---|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or("–".into());
    for r in &s.rows {
        let d = r.set.density.as_ref();
        let rss = per_pod(s, r.pods, &r.handler, MemKind::Rss);
        let pss = per_pod(s, r.pods, &r.handler, MemKind::Pss);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}/{} | {} | {} | {} | {} |",
            r.pods,
            r.handler,
            d.map(|d| d.pods.to_string()).unwrap_or("–".into()),
            d.map(|d| d.shim_processes.to_string())
                .unwrap_or("–".into()),
            r.set.failures,
            r.set.pods,
            f(rss.map(|t| t.0)),
            f(rss.map(|t| t.1)),
            f(rss.map(|t| t.2)),
            f(pss.map(|t| t.2)),
        );
    }
    for e in s.rows.iter().flat_map(|r| &r.set.errors) {
        let _ = writeln!(out, "\n- error: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Mem;
    use crate::results::{Density, IdleSet, NodeRow};

    fn set(pods: usize, shims: usize, shim_kib: u64, infra_kib: u64) -> IdleSet {
        IdleSet {
            pods,
            density: Some(Density {
                pods,
                shim_processes: shims,
                shim_total: Mem {
                    rss_kib: shim_kib,
                    pss_kib: shim_kib,
                    ..Default::default()
                },
                infra_total: Mem {
                    rss_kib: infra_kib,
                    pss_kib: infra_kib,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn one_node_shim_is_shared_by_its_pods() {
        let study = NodeStudy {
            rows: vec![
                NodeRow {
                    pods: 4,
                    handler: RUNC.into(),
                    set: set(4, 4, 4 * 12 * 1024, 0),
                },
                NodeRow {
                    pods: 4,
                    handler: PER_POD.into(),
                    set: set(4, 4, 4 * 2048, 4 * 1024),
                },
                NodeRow {
                    pods: 4,
                    handler: PER_NODE.into(),
                    set: set(4, 1, 4096, 4 * 1024),
                },
            ],
        };
        assert_eq!(
            per_pod(&study, 4, PER_NODE, MemKind::Rss),
            Some((1.0, 1.0, 2.0))
        );
        assert_eq!(
            per_pod(&study, 4, PER_POD, MemKind::Rss),
            Some((2.0, 1.0, 3.0))
        );
        let table = render(&study);
        assert!(
            table.contains("| 4 | rund per-node | 4 | 1 | 0/4 | 1.00 | 1.00 | 2.00 | 2.00 |"),
            "{table}"
        );
        assert_eq!(per_pod(&study, 5, PER_NODE, MemKind::Rss), None);
    }
}
