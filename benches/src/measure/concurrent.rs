//! Concurrent start of N sleeping containers, then (optionally) density,
//! then teardown of the same N.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use super::{density, ms};
use crate::ctr::{short_error, Ctr, CtrError};
use crate::env::BenchEnv;
use crate::progress::Progress;
use crate::results::{note_error, ConcurrentRun, Teardown};
use crate::runtime::Runtime;
use crate::stats::Summary;

/// Outcome of one operation launched on all ids at once.
struct Burst {
    wall_ms: f64,
    /// Per id: latency or error, in id order.
    each: Vec<Result<f64, CtrError>>,
}

/// Runs `op` on every id from its own thread, all released by one barrier.
/// Wall time runs from the release to the last operation returning.
fn burst<F>(ctr: &Ctr, ids: &[String], progress: &Progress, op: F) -> Burst
where
    F: Fn(&Ctr, &str) -> Result<(), CtrError> + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let gate = Arc::new(Barrier::new(ids.len() + 1));
    let handles: Vec<_> = ids
        .iter()
        .map(|id| {
            let (op, gate, ctr, id) = (op.clone(), gate.clone(), ctr.clone(), id.clone());
            thread::spawn(move || {
                gate.wait();
                let t = Instant::now();
                let r = op(&ctr, &id);
                (r, t.elapsed(), Instant::now())
            })
        })
        .collect();
    gate.wait();
    let t0 = Instant::now();
    let mut last = t0;
    let mut each = Vec::with_capacity(ids.len());
    for h in handles {
        match h.join() {
            Ok((r, d, end)) => {
                last = last.max(end);
                each.push(r.map(|()| ms(d)));
            }
            Err(_) => each.push(Err(CtrError::Spawn(std::io::Error::other(
                "thread panicked",
            )))),
        }
        progress.inc(1);
    }
    Burst {
        wall_ms: ms(last - t0),
        each,
    }
}

pub struct Options {
    pub density: bool,
}

pub fn run(
    env: &BenchEnv,
    rt: &Runtime,
    n: usize,
    round: usize,
    opts: &Options,
    progress: &Progress,
) -> ConcurrentRun {
    let ids: Vec<String> = (0..n)
        .map(|i| format!("{}-c{n}r{round}-{i}", rt.kind.tag()))
        .collect();
    progress.phase(format!("{} concurrent start N={n}", rt.kind.label()));
    let (rt2, rootfs) = (rt.clone(), env.rootfs.clone());
    let start = burst(&env.ctr, &ids, progress, move |ctr, id| {
        ctr.run_detached(&rt2, &rootfs, id, &["/bin/sleep", "100000"])
    });

    let tasks = env.ctr.tasks().unwrap_or_default();
    let running: Vec<_> = tasks
        .iter()
        .filter(|t| ids.contains(&t.id) && t.status == "RUNNING")
        .collect();
    let running_count = running.len();
    let is_running = |id: &str| running.iter().any(|t| t.id == id);

    // A container counts only if ctr succeeded AND its task is RUNNING: a
    // task that dies at once must not lend its (short) latency to the figures.
    let mut errors = Vec::new();
    let mut latencies = Vec::new();
    let mut started_ids = Vec::new();
    for (id, r) in ids.iter().zip(start.each) {
        match r {
            Ok(l) => {
                if is_running(id) {
                    latencies.push(l);
                } else {
                    note_error(
                        &mut errors,
                        "`ctr run -d` succeeded but the task was not RUNNING right after".into(),
                    );
                }
                started_ids.push(id.clone());
            }
            Err(e) => note_error(&mut errors, short_error(&e, id)),
        }
    }

    let dens = opts.density.then(|| {
        progress.phase(format!("{} density N={n}", rt.kind.label()));
        let pids: Vec<u32> = running.iter().map(|t| t.pid).collect();
        density::measure(&pids, &env.workload_binary())
    });

    progress.phase(format!("{} teardown N={n}", rt.kind.label()));
    let td = burst(&env.ctr, &started_ids, progress, |ctr, id| {
        ctr.task_delete_force(id)?;
        ctr.container_rm(id)
    });
    let mut td_errors = Vec::new();
    let mut td_fail = 0;
    for (id, r) in started_ids.iter().zip(&td.each) {
        if let Err(e) = r {
            td_fail += 1;
            note_error(&mut td_errors, short_error(e, id));
        }
    }
    // Failed starts (and failed teardowns) may leave containers: remove them,
    // untimed, so the next measurement starts clean.
    for id in &ids {
        if !started_ids.contains(id) {
            let _ = env.ctr.remove_everything(id);
        }
    }
    progress.inc((n - started_ids.len()) as u64);
    if td_fail > 0 {
        env.sweep();
    }

    ConcurrentRun {
        runtime: rt.kind,
        variant: None,
        n,
        round,
        wall_ms: start.wall_ms,
        started: started_ids.len(),
        running: running_count,
        failures: n - latencies.len(),
        errors,
        latency: Summary::of(&latencies),
        latencies_ms: latencies,
        density: dens,
        // Nothing started: no teardown to time.
        teardown: (!started_ids.is_empty()).then_some(Teardown {
            wall_ms: td.wall_ms,
            failures: td_fail,
            errors: td_errors,
        }),
    }
}
