//! Concurrent start of N sleeping containers, then (optionally) density,
//! then teardown of the same N.

use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use super::Driver;
use super::{density, ms};
use crate::cpu::CpuSplit;
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::Progress;
use crate::results::{note_error, ConcurrentRun, Teardown};
use crate::runtime::Runtime;
use crate::stats::Summary;

/// Outcome of one operation launched on all ids at once.
struct Burst {
    wall_ms: f64,
    /// Per id: latency or a short error, in id order.
    each: Vec<Result<f64, String>>,
}

/// Runs `op` on every id from its own thread, all released by one barrier.
/// Wall time runs from the release to the last operation returning. The
/// release is the earliest clock read after the barrier, by any thread: the
/// main thread alone may be woken hundreds of ms after the others on a busy
/// machine, and a wall from its clock would then be shorter than the
/// slowest start.
fn burst<F>(ids: &[String], progress: &Progress, op: F) -> Burst
where
    F: Fn(&str) -> Result<(), String> + Sync,
{
    let gate = Barrier::new(ids.len() + 1);
    let (op, gate) = (&op, &gate);
    thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                s.spawn(move || {
                    gate.wait();
                    let t = Instant::now();
                    let r = op(id);
                    (r, t, Instant::now())
                })
            })
            .collect();
        gate.wait();
        let main_t0 = Instant::now();
        let mut spans = Vec::with_capacity(ids.len());
        let mut each = Vec::with_capacity(ids.len());
        for h in handles {
            match h.join() {
                Ok((r, t, end)) => {
                    spans.push((t, end));
                    each.push(r.map(|()| ms(end - t)));
                }
                Err(_) => each.push(Err("thread panicked".into())),
            }
            progress.inc(1);
        }
        Burst {
            wall_ms: ms(wall(main_t0, &spans)),
            each,
        }
    })
}

/// From the earliest start (the main thread's clock included) to the last end.
fn wall(main_t0: Instant, spans: &[(Instant, Instant)]) -> std::time::Duration {
    let t0 = spans.iter().map(|s| s.0).fold(main_t0, Instant::min);
    let last = spans.iter().map(|s| s.1).fold(t0, Instant::max);
    last - t0
}

pub struct Options {
    pub density: bool,
}

pub fn run(
    env: &BenchEnv,
    driver: Driver,
    rt: &Runtime,
    n: usize,
    round: usize,
    opts: &Options,
    progress: &Progress,
) -> ConcurrentRun {
    let ids: Vec<String> = (0..n)
        .map(|i| format!("{}-{}c{n}r{round}-{i}", rt.kind.tag(), driver.tag()))
        .collect();
    progress.phase(format!(
        "{} concurrent start N={n}{}",
        rt.kind.label(),
        driver.suffix()
    ));
    let argv = ["/bin/sleep", "100000"];
    let before = env.cpu.as_ref().and_then(|m| m.snap());
    let start = burst(&ids, progress, |id| match driver {
        Driver::Ctr => env
            .ctr
            .run_detached(rt, &env.rootfs, id, &argv)
            .map_err(|e| short_error(&e, id)),
        Driver::Api(api) => api
            .run_detached(rt, id, &argv)
            .map_err(|e| short_error(&e, id)),
    });
    let cpu_start = cpu_span(env, before, n);

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
            Err(e) => note_error(&mut errors, e),
        }
    }

    let dens = opts.density.then(|| {
        progress.phase(format!("{} density N={n}", rt.kind.label()));
        let pids: Vec<u32> = running.iter().map(|t| t.pid).collect();
        density::measure(&pids, &env.workload_binary())
    });

    progress.phase(format!("{} teardown N={n}", rt.kind.label()));
    let before = env.cpu.as_ref().and_then(|m| m.snap());
    let td = burst(&started_ids, progress, |id| match driver {
        Driver::Ctr => env
            .ctr
            .task_delete_force(id)
            .and_then(|()| env.ctr.container_rm(id))
            .map_err(|e| short_error(&e, id)),
        Driver::Api(api) => api.remove(id).map_err(|e| short_error(&e, id)),
    });
    let cpu_teardown = cpu_span(env, before, started_ids.len());
    let mut td_errors = Vec::new();
    let mut td_fail = 0;
    for r in &td.each {
        if let Err(e) = r {
            td_fail += 1;
            note_error(&mut td_errors, e.clone());
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
        client: driver.client(),
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
        cpu_start,
        cpu_teardown,
    }
}

/// CPU per pod since `before` (taken by the caller right before the burst).
fn cpu_span(env: &BenchEnv, before: Option<crate::cpu::Snap>, pods: usize) -> Option<CpuSplit> {
    let m = env.cpu.as_ref()?;
    m.split(&before?, &m.snap_after()?, pods)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_wall_starts_at_the_earliest_release_and_covers_the_slowest_start() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        // The main thread woke 400 ms after the first worker.
        let spans = [(at(0), at(900)), (at(10), at(300)), (at(600), at(700))];
        assert_eq!(wall(at(400), &spans), Duration::from_millis(900));
        // The main thread first: the wall runs from its clock.
        assert_eq!(
            wall(at(0), &[(at(50), at(250))]),
            Duration::from_millis(250)
        );
        // No operation returned: no wall.
        assert_eq!(wall(at(5), &[]), Duration::ZERO);
    }
}
