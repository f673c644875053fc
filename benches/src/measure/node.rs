//! rund's per-node mode against its per-pod mode and runc-v2: N idle pods per
//! handler, started a few at a time, left to settle, weighed as the density
//! measure does (each shim once, its sum shared by the pods it serves), then
//! removed before the next handler starts, so each is weighed alone.

use std::thread;

use super::{density, idle::SETTLE};
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::{note_error, IdleSet, NodeRow, NodeStudy};
use crate::runtime::{Runtime, RuntimeKind};

pub const RUNC: &str = "runc-v2";
pub const PER_POD: &str = "rund per-pod";
pub const PER_NODE: &str = "rund per-node";
/// ctr processes at once: enough to fill 200 pods quickly, few enough that
/// the 2-core machine is not the figure.
const WORKERS: usize = 4;

pub fn steps(sizes: &[usize]) -> u64 {
    sizes.iter().map(|&n| 3 * n as u64).sum()
}

pub fn run(env: &BenchEnv, sizes: &[usize], progress: &Progress) -> NodeStudy {
    let dir = env.containerd.dir.join("bench-configs");
    let _ = std::fs::create_dir_all(&dir);
    let config = |name: &str, mode: &str| {
        let path = dir.join(format!("{name}.toml"));
        // Identical but for the mode; trims after 1 s as by default.
        let _ = std::fs::write(&path, format!("[shim]\nmode = \"{mode}\"\n"));
        Runtime {
            kind: RuntimeKind::Rund,
            config_path: Some(path),
        }
    };
    let handlers = [
        (RUNC, Runtime::plain(RuntimeKind::Runc)),
        (PER_POD, config("per-pod", "per-pod")),
        (PER_NODE, config("per-node", "per-node")),
    ];
    let mut study = NodeStudy::default();
    for &n in sizes {
        for (i, (label, rt)) in handlers.iter().enumerate() {
            if interrupted() {
                return study;
            }
            progress.phase(format!("node study: {n} pods, {label}"));
            let set = weigh(env, rt, n, &format!("node{i}-{n}"), progress);
            study.rows.push(NodeRow {
                pods: n,
                handler: label.to_string(),
                set,
            });
        }
    }
    study
}

/// Starts `n` sleeping pods, lets them settle, weighs them, removes them.
fn weigh(env: &BenchEnv, rt: &Runtime, n: usize, prefix: &str, progress: &Progress) -> IdleSet {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let mut set = IdleSet {
        pods: n,
        settle_ms: SETTLE.as_millis() as u64,
        ..Default::default()
    };
    let errors = on_workers(&ids, |id| {
        env.ctr
            .run_detached(rt, &env.rootfs, id, &["/bin/sleep", "100000"])
            .map_err(|e| short_error(&e, id))
    });
    progress.inc(n as u64);
    for e in errors {
        set.failures += 1;
        note_error(&mut set.errors, e);
    }
    // Listed before the settle, as in the idle measure: `ctr task ls` asks
    // every shim for its state.
    let tasks = env.ctr.tasks().unwrap_or_default();
    std::thread::sleep(SETTLE);
    let pids: Vec<u32> = tasks
        .iter()
        .filter(|t| t.status == "RUNNING" && ids.contains(&t.id))
        .map(|t| t.pid)
        .collect();
    if !pids.is_empty() {
        set.density = Some(density::measure(&pids, &env.workload_binary()));
    }
    on_workers(&ids, |id| {
        env.ctr
            .remove_everything(id)
            .map_err(|e| short_error(&e, id))
    });
    set
}

/// Runs `op` on every id, `WORKERS` threads each taking every WORKERS-th id;
/// returns the errors.
fn on_workers<F>(ids: &[String], op: F) -> Vec<String>
where
    F: Fn(&str) -> Result<(), String> + Sync,
{
    let op = &op;
    thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                s.spawn(move || {
                    ids.iter()
                        .skip(w)
                        .step_by(WORKERS)
                        .filter_map(|id| op(id).err())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a worker panicked".into()])
            })
            .collect()
    })
}
