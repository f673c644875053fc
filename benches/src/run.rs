//! One bench run: environment up, phases in order, everything cleaned up.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::api::Api;
use crate::cli::Plan;
use crate::env::{BenchEnv, EnvError};
use crate::measure::{concurrent, cri, features, idle, kube, node, pool, single, stop, Driver};
use crate::progress::{interrupted, Progress};
use crate::report::figures;
use crate::results::{Meta, Results};
use crate::runtime::{Runtime, RuntimeKind};

fn total_steps(p: &Plan) -> u64 {
    let r = p.runtimes.len();
    // The floor runs alongside in the single and concurrent phases.
    let rf = r + usize::from(p.floor);
    let mut t = 0;
    if p.single {
        t += (p.warmup + p.iterations) * rf;
    }
    let passes = 1 + usize::from(p.api);
    if p.single {
        t += (passes - 1) * (p.warmup + p.iterations) * rf;
    }
    if p.concurrent {
        t += passes
            * p.concurrency
                .iter()
                .map(|n| 2 * n * p.rounds * rf)
                .sum::<usize>();
    }
    if p.idle {
        t += p.idle_pods * r;
    }
    if p.stop {
        t += p.stop_samples * r;
    }
    if p.cri {
        t += (p.cri_pods + 1) * crate::measure::cri::HANDLERS.len();
    }
    let mut t = t as u64;
    if p.pool {
        t += pool::steps(&pool_options(p, None));
    }
    if p.kube {
        t += kube::steps(&kube_options(p));
    }
    if p.node {
        t += node::steps(&p.node_pods);
    }
    if p.features {
        t += features::SWITCHES
            .iter()
            .map(|s| features::steps(s, p.feature_iterations, &p.concurrency))
            .sum::<u64>();
    }
    t
}

fn pool_options<'a>(p: &'a Plan, bin_dir: Option<&'a std::path::Path>) -> pool::Options<'a> {
    pool::Options {
        iterations: p.feature_iterations,
        concurrency: &p.concurrency,
        rounds: p.pool_rounds,
        cycles: p.pool_cycles,
        rund_bin_dir: bin_dir,
    }
}

fn kube_options(p: &Plan) -> kube::Options<'_> {
    kube::Options {
        pods: &p.kube_pods,
        samples: p.kube_samples,
        rounds: p.study_rounds,
        settle: p.kube_settle,
        with_rund: p.runtimes.contains(&RuntimeKind::Rund),
        out_dir: &p.out_dir,
    }
}

fn first_line(cmd: &str, arg: &str) -> String {
    std::process::Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{cmd}: unknown version"))
}

fn meta(p: &Plan, env: &BenchEnv) -> Meta {
    Meta {
        started_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        containerd: first_line("containerd", "--version"),
        runc: first_line("runc", "--version"),
        quick: p.quick,
        iterations: p.iterations,
        warmup: p.warmup,
        concurrency: p.concurrency.clone(),
        rounds: p.rounds,
        stop_samples: p.stop_samples,
        stop_cap_s: p.stop_cap.as_secs(),
        runtimes: p.runtimes.clone(),
        rund_bin_dir: env.rund_bin_dir.as_ref().map(|d| d.display().to_string()),
        duration_s: 0.0,
    }
}

pub fn run(p: &Plan) -> Result<Results, EnvError> {
    let t_all = Instant::now();
    let with_rund = p.runtimes.contains(&RuntimeKind::Rund);
    let env = BenchEnv::start(with_rund, p.debug, p.ctr_timeout)?;
    let rts: Vec<Runtime> = p.runtimes.iter().map(|k| Runtime::plain(*k)).collect();
    let floor = p.floor && env.has_floor;
    // The timed phases measure the floor in the same alternation.
    let mut timed = rts.clone();
    if floor {
        timed.push(Runtime::plain(RuntimeKind::Noop));
    }
    let progress = Progress::new(total_steps(p));
    let mut res = Results {
        meta: meta(p, &env),
        warmup: BTreeMap::new(),
        single_start: BTreeMap::new(),
        single_cpu: BTreeMap::new(),
        api_single_start: BTreeMap::new(),
        api_single_cpu: BTreeMap::new(),
        concurrent: Vec::new(),
        stop: BTreeMap::new(),
        idle: BTreeMap::new(),
        cri: None,
        features: Vec::new(),
        pool: None,
        kube: None,
        node: None,
        notes: Vec::new(),
        table: Vec::new(),
    };
    let label = |rt: &Runtime| rt.kind.label().to_string();

    if p.single {
        progress.phase("warm-up");
        let d = Driver::Ctr;
        res.warmup = single::run(&env, d, &timed, p.warmup, "w", label, &progress).0;
        progress.phase("single start");
        (res.single_start, res.single_cpu) =
            single::run(&env, d, &timed, p.iterations, "s", label, &progress);
    }
    if p.concurrent {
        bursts(p, &env, Driver::Ctr, &timed, &mut res, &progress);
    }
    if p.api && !interrupted() {
        progress.phase("client API: templates");
        match Api::connect(
            env.containerd.address(),
            &env.ctr,
            &env.rootfs,
            &timed,
            p.ctr_timeout,
        ) {
            Ok(api) => {
                let d = Driver::Api(&api);
                if p.single {
                    progress.phase("single start (API)");
                    let _ = single::run(&env, d, &timed, p.warmup, "w", label, &progress);
                    (res.api_single_start, res.api_single_cpu) =
                        single::run(&env, d, &timed, p.iterations, "s", label, &progress);
                }
                if p.concurrent {
                    bursts(p, &env, d, &timed, &mut res, &progress);
                }
            }
            Err(e) => res
                .notes
                .push(format!("the client API measures were not taken: {e}")),
        }
    }
    if p.idle && !interrupted() {
        res.idle = idle::run(&env, &rts, p.idle_pods, &progress);
    }
    if p.node && !interrupted() {
        res.node = Some(node::run(&env, &p.node_pods, &progress));
    }
    if p.stop && !interrupted() {
        res.stop = stop::run(&env, &rts, p.stop_samples, p.stop_cap, &progress);
    }
    if p.features && !interrupted() {
        let o = features::Options {
            iterations: p.feature_iterations,
            concurrency: &p.concurrency,
            overrides: &p.feature_configs,
        };
        res.features = features::run(&env, &o, &progress);
    }
    if p.pool && !interrupted() {
        let o = pool_options(p, env.rund_bin_dir.as_deref());
        res.pool = Some(pool::run(&env, &o, &progress));
    }
    if p.kube && !interrupted() {
        // Its own containerd with CRI; the first one idles.
        res.kube = Some(kube::run(&kube_options(p), &progress));
    }
    if let Some(n) = &env.cpu_note {
        res.notes.push(n.clone());
    }
    if p.floor && !env.has_floor {
        res.notes.push(format!(
            "floor not measured: {} is not built next to rund-bench",
            crate::runtime::NOOP_SHIM_BIN
        ));
    }
    if p.cri && !interrupted() {
        // Its own containerd (2.1, CRI, a pod network); the first one idles.
        res.cri = Some(cri::run(p.cri_pods, with_rund, &p.out_dir, &progress));
    }
    progress.phase("clean-up");
    let left = env.sweep();
    progress.finish();
    if left > 0 {
        res.notes.push(format!(
            "{left} container(s) were left after the phases and removed by the final sweep"
        ));
    }
    if interrupted() {
        res.notes.push(
            "interrupted: the figures cover only the samples taken before the interrupt".into(),
        );
    }
    add_notes(&mut res);
    let kept = crate::env::keep_log(&env.containerd.log, &p.out_dir, "containerd.log");
    res.notes.push(kept);
    drop(env); // stops containerd by pid and removes its directory
    res.meta.duration_s = t_all.elapsed().as_secs_f64();
    res.table = figures::build(&res);
    Ok(res)
}

/// Every N, `rounds` rounds, the runtimes alternating within each.
fn bursts(
    p: &Plan,
    env: &BenchEnv,
    driver: Driver,
    timed: &[Runtime],
    res: &mut Results,
    progress: &Progress,
) {
    for &n in &p.concurrency {
        for round in 0..p.rounds {
            for rt in crate::measure::alternate(timed, round) {
                if interrupted() {
                    return;
                }
                // The no-op shim runs no process, and the API runs start the
                // same pods again: nothing new to weigh.
                let opts = concurrent::Options {
                    density: p.density
                        && rt.kind != RuntimeKind::Noop
                        && matches!(driver, Driver::Ctr),
                };
                res.concurrent
                    .push(concurrent::run(env, driver, rt, n, round, &opts, progress));
            }
        }
    }
}

fn add_notes(res: &mut Results) {
    let mut notes = Vec::new();
    for (rt, set) in res.warmup.iter().chain(&res.single_start) {
        for e in &set.errors {
            notes.push(format!("{rt} start error: {e}"));
        }
    }
    for (rt, set) in &res.api_single_start {
        for e in &set.errors {
            notes.push(format!("{rt} start error (API): {e}"));
        }
    }
    for r in &res.concurrent {
        let via = r.client.suffix();
        for e in &r.errors {
            notes.push(format!(
                "{} N={}{via} start error: {e}",
                r.runtime.label(),
                r.n
            ));
        }
        if let Some(t) = &r.teardown {
            for e in &t.errors {
                notes.push(format!(
                    "{} N={}{via} teardown error: {e}",
                    r.runtime.label(),
                    r.n
                ));
            }
        }
        if let Some(d) = &r.density {
            if d.unresolved > 0 {
                notes.push(format!(
                    "{} N={}: the shim of {} task(s) was not found",
                    r.runtime.label(),
                    r.n,
                    d.unresolved
                ));
            }
        }
    }
    for (rt, s) in &res.stop {
        for e in &s.errors {
            notes.push(format!("{rt} stop error: {e}"));
        }
    }
    if res.concurrent.iter().any(|r| r.density.is_some()) {
        notes.push(
            "density: shim = nearest containerd-shim* ancestor of each task pid; agent + inits = \
             its other descendants except the workload (busybox). RSS counts shared pages once \
             per pod; PSS splits them."
                .into(),
        );
    }
    res.notes.splice(0..0, notes);
}
