//! What an idle shim costs when containerd polls it: the CPU time of every
//! idle pod's shim over a series of `ctr task ls` (one State request to
//! each shim), at two spacings, and its RSS one spacing after the last
//! poll. rund's shim trims what polls alone mapped back only after
//! `[idle] trim_after_polls_ms` (a minute), so a polled shim keeps its poll
//! code mapped instead of paying for a trim and the faults after it at
//! every poll.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::ctr::Ctr;
use crate::procfs;
use crate::results::PollCost;

/// The spacings measured, ms: closer than rund's default trim delay, then
/// further apart.
pub const GAPS_MS: [u64; 2] = [100, 500];
/// Polls per spacing.
pub const POLLS: usize = 10;

/// One series per spacing for each runtime's shims (`shims[label]`); all
/// are polled together, as one `ctr task ls` asks every task's shim.
pub fn run(ctr: &Ctr, shims: &HashMap<String, BTreeSet<u32>>) -> HashMap<String, Vec<PollCost>> {
    let mut out: HashMap<String, Vec<PollCost>> = HashMap::new();
    for gap_ms in GAPS_MS {
        let before = sample(shims);
        let mut failed = 0;
        for _ in 0..POLLS {
            if ctr.tasks().is_err() {
                failed += 1;
            }
            std::thread::sleep(Duration::from_millis(gap_ms));
        }
        let after = sample(shims);
        let rss = rss_kib(shims);
        for (label, pids) in shims {
            let (mut ns, mut ended) = (0u64, 0usize);
            for pid in pids {
                let (Some(b), Some(a)) = (before.get(pid), after.get(pid)) else {
                    ended += 1;
                    continue;
                };
                for (tid, t0) in b {
                    match a.get(tid) {
                        Some(t1) => ns += t1.saturating_sub(*t0),
                        None => ended += 1,
                    }
                }
                // Threads born during the series ran only inside it.
                ns += a
                    .iter()
                    .filter(|(t, _)| !b.contains_key(t))
                    .map(|(_, v)| v)
                    .sum::<u64>();
            }
            let polls = POLLS - failed;
            let per_poll_us = (polls > 0 && !pids.is_empty())
                .then(|| ns as f64 / 1e3 / (pids.len() * polls) as f64);
            out.entry(label.clone()).or_default().push(PollCost {
                gap_ms,
                polls,
                shims: pids.len(),
                cpu_us_per_poll: per_poll_us,
                threads_ended: ended,
                rss_kib_after: rss.get(label).copied(),
            });
        }
    }
    out
}

/// Per label: the mean RSS of its shims that are still there.
fn rss_kib(shims: &HashMap<String, BTreeSet<u32>>) -> HashMap<String, f64> {
    shims
        .iter()
        .filter_map(|(label, pids)| {
            let kib: Vec<u64> = pids
                .iter()
                .filter_map(|&p| procfs::mem_of(p).map(|m| m.rss_kib))
                .collect();
            (!kib.is_empty()).then(|| {
                (
                    label.clone(),
                    kib.iter().sum::<u64>() as f64 / kib.len() as f64,
                )
            })
        })
        .collect()
}

/// Per shim pid: its threads' CPU times.
fn sample(shims: &HashMap<String, BTreeSet<u32>>) -> HashMap<u32, HashMap<u32, u64>> {
    shims
        .values()
        .flatten()
        .filter_map(|&pid| Some((pid, procfs::thread_cpu_ns(pid)?)))
        .collect()
}
