//! CPU time per pod, by who spends it (`crate::cpu`): a total row per span in
//! the main table, and the split in a section of its own.

use std::fmt::Write as _;

use super::figures::{row, runs_via, via};
use crate::cpu::CpuSplit;
use crate::results::{Client, ConcurrentRun, Results, TableRow};
use crate::runtime::RuntimeKind;

const KINDS: [RuntimeKind; 3] = [RuntimeKind::Rund, RuntimeKind::Runc, RuntimeKind::Noop];

/// One span's split per runtime, pods pooled over the rounds.
struct Span {
    name: String,
    by: [Option<CpuSplit>; 3],
}

fn pooled<'a>(it: impl Iterator<Item = &'a CpuSplit>) -> Option<CpuSplit> {
    it.fold(None, |acc: Option<CpuSplit>, s| {
        let mut a = acc.unwrap_or_default();
        a.add(s);
        Some(a)
    })
}

fn spans(results: &Results) -> Vec<Span> {
    let mut out = Vec::new();
    for client in [Client::Ctr, Client::Api] {
        client_spans(results, client, &mut out);
    }
    out
}

fn client_spans(results: &Results, client: Client, out: &mut Vec<Span>) {
    let single = match client {
        Client::Ctr => &results.single_cpu,
        Client::Api => &results.api_single_cpu,
    };
    if !single.is_empty() {
        out.push(Span {
            name: via(client, "single start (`run --rm`, one cycle)".into()),
            by: KINDS.map(|k| single.get(k.label()).copied()),
        });
    }
    for &n in &results.meta.concurrency {
        let of = |k: RuntimeKind, f: fn(&ConcurrentRun) -> Option<&CpuSplit>| {
            pooled(runs_via(results, client, k, n).into_iter().filter_map(f))
        };
        for (what, f) in [
            (
                "start",
                (|r: &ConcurrentRun| r.cpu_start.as_ref())
                    as fn(&ConcurrentRun) -> Option<&CpuSplit>,
            ),
            ("teardown", |r| r.cpu_teardown.as_ref()),
        ] {
            let by = KINDS.map(|k| of(k, f));
            if by.iter().any(Option::is_some) {
                out.push(Span {
                    name: via(client, format!("{n} concurrent: {what}")),
                    by,
                });
            }
        }
    }
}

/// The total per pod of each span, rund against runc-v2 and the floor.
pub fn rows(results: &Results, rows: &mut Vec<TableRow>) {
    for s in spans(results) {
        let total = |i: usize| s.by[i].map(|c| c.total_ms());
        let mut r = row(
            format!("{}: CPU per pod, all processes", s.name),
            "ms",
            total(0),
            total(1),
            true,
            "split below (CPU per pod)".into(),
        );
        r.floor = total(2);
        rows.push(r);
    }
}

fn cell(v: f64) -> String {
    format!("{v:.1}")
}

/// The split table, or `None` when nothing was measured.
pub fn render(results: &Results) -> Option<String> {
    let spans = spans(results);
    if spans.is_empty() {
        return None;
    }
    let mut s = String::from(
        "| span | runtime | pods | ctr + bench | containerd | runtime outside the containers | \
         containers' cgroups | elsewhere | all |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for sp in &spans {
        for (k, c) in KINDS.iter().zip(&sp.by) {
            let Some(c) = c else { continue };
            let name = if *k == RuntimeKind::Noop {
                "floor"
            } else {
                k.label()
            };
            let _ = writeln!(
                s,
                "| {} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                sp.name,
                c.pods,
                cell(c.client_ms),
                cell(c.containerd_ms),
                cell(c.runtime_ms),
                cell(c.containers_ms),
                cell(c.elsewhere_ms),
                cell(c.total_ms())
            );
        }
    }
    s.push_str(
        "\nms of CPU per pod. containerd runs in a cpuacct cgroup of its own, so what it \
         spawns is charged there: \"runtime outside the containers\" is that cgroup less \
         containerd's live threads (shims, rund's agents and launchers, runc before its init \
         joins the container). \"containers' cgroups\": everything under the namespace's \
         cgroup (inits, workloads). \"elsewhere\": the machine's busy time (`/proc/stat`, in \
         ticks) less the rest: kernel threads (cgroup and namespace teardown, RCU), and \
         anything else that ran. A span runs from the burst's release to its last `ctr` \
         returning; work a shim does after that (an exit, an idle trim) falls into the next \
         span.\n",
    );
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(concurrency: Vec<usize>) -> Results {
        Results {
            meta: crate::results::Meta {
                concurrency,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn split(pods: usize, client: f64, runtime: f64) -> CpuSplit {
        CpuSplit {
            pods,
            client_ms: client,
            runtime_ms: runtime,
            ..CpuSplit::default()
        }
    }

    #[test]
    fn rounds_pool_by_pods_and_totals_reach_the_main_table() {
        let mut res = results(vec![50]);
        res.single_cpu
            .insert(RuntimeKind::Rund.label().into(), split(30, 10.0, 5.0));
        res.single_cpu
            .insert(RuntimeKind::Noop.label().into(), split(30, 10.0, 1.0));
        for (k, client) in [(RuntimeKind::Rund, 4.0), (RuntimeKind::Rund, 8.0)] {
            let mut r = crate::report::figures::tests::burst(k, 0, 1000.0, 0);
            r.n = 50;
            r.cpu_start = Some(split(50, client, 2.0));
            res.concurrent.push(r);
        }
        let mut rows = Vec::new();
        super::rows(&res, &mut rows);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].rund, Some(15.0));
        assert_eq!(rows[0].floor, Some(11.0));
        assert_eq!(rows[0].runc, None);
        // Two rounds of 50: (4 + 8) / 2 + 2.
        assert_eq!(
            rows[1].figure,
            "50 concurrent: start: CPU per pod, all processes"
        );
        assert_eq!(rows[1].rund, Some(8.0));
        let t = render(&res).unwrap();
        assert!(
            t.contains("| 50 concurrent: start | rund | 100 | 6.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| single start (`run --rm`, one cycle) | floor | 30 |"),
            "{t}"
        );
        assert!(!t.contains("concurrent: teardown"), "{t}");
    }

    #[test]
    fn nothing_measured_renders_nothing() {
        let res = results(vec![50]);
        assert!(render(&res).is_none());
        let mut rows = Vec::new();
        super::rows(&res, &mut rows);
        assert!(rows.is_empty());
    }
}
