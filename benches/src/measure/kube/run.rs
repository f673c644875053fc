//! The study from start to clean-up: containerd up, pod parent and tracer
//! made, a warm-up pod per handler (which also proves each rund handler's
//! config is honoured), the levels with handlers alternating per round, and
//! everything the bench made removed again, also after an error or an
//! interrupt (the tracer and containerd clean up on drop).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use rund_tests::containerd::line;
use rund_tests::{Containerd, ContainerdOpts};

use super::cgroups::{self, Layout};
use super::handlers::{self, Handler};
use super::model::{KubeRun, KubeStudy};
use super::ops::{self, Scope};
use super::phases;
use super::pods::{self, Ctx, Pod};
use super::trace::Tracer;
use super::Options;
use crate::measure::pool::dying::Counter;
use crate::progress::{interrupted, Progress};
use crate::stats::Summary;

/// The kubelet's rmdir of a pod cgroup retries this long when it is busy.
const RMDIR_LIMIT: Duration = Duration::from_secs(10);

/// What each run reads and writes besides the pods.
struct Probes<'a> {
    tracer: Option<&'a Tracer>,
    counter: Option<&'a Counter>,
    /// The pods' parent as the tracepoints print it (`/rit-x-pods/…`).
    top: String,
    settle: Duration,
}

pub fn run(o: &Options, progress: &Progress) -> KubeStudy {
    let mut study = KubeStudy {
        settle_s: o.settle.as_secs(),
        ..Default::default()
    };
    let skip = |study: &mut KubeStudy, why: String| {
        study.note = format!("skipped: {why}");
        progress.inc(super::steps(o));
    };
    progress.phase("kube: containerd with CRI");
    let layout = match Layout::detect() {
        Ok(l) => l,
        Err(e) => {
            skip(&mut study, e);
            return study;
        }
    };
    study.layout = layout.describe();
    let bins = match line::selected() {
        Ok(b) => b,
        Err(e) => {
            skip(&mut study, format!("containerd: {e}"));
            return study;
        }
    };
    study.containerd = bins.version.clone();
    let dir = match Containerd::new_dir() {
        Ok(d) => d,
        Err(e) => {
            skip(&mut study, format!("instance dir: {e}"));
            return study;
        }
    };
    let mut hs = match handlers::prepare(&dir.join("kube"), o.with_rund) {
        Ok(h) => h,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            skip(&mut study, format!("writing rund configs: {e}"));
            return study;
        }
    };
    let mut opts = ContainerdOpts::new().cri().with_runc();
    opts.debug = false;
    opts.with_rund = o.with_rund;
    if let Some(on) = hs.iter().find(|h| h.name == handlers::RUND_POOL_ON) {
        opts.rund_config_path = on.config.clone();
    }
    if let Some(off) = hs.iter().find(|h| h.name == handlers::RUND_POOL_OFF) {
        let plugin = if bins.is_v2() {
            "io.containerd.cri.v1.runtime"
        } else {
            "io.containerd.grpc.v1.cri"
        };
        let cfg = off.config.clone().unwrap_or_default();
        opts.extra_config = handlers::extra_runtime(plugin, off.name, &cfg, bins.is_v2());
    }
    // From here on the instance owns `dir` and removes it on drop.
    let ctd = match Containerd::start_in(dir, opts, bins) {
        Ok(c) => c,
        Err(e) => {
            skip(&mut study, format!("starting containerd: {e}"));
            return study;
        }
    };
    let cri = match ctd.cri_client() {
        Ok(c) => c,
        Err(e) => {
            skip(&mut study, format!("CRI client: {e}"));
            return study;
        }
    };
    let top_rel = format!(
        "{}/kubepods/besteffort",
        ctd.cgroup_parent.trim_start_matches('/')
    );
    study.pod_parent = format!("/{top_rel}");
    let parent_rel = ctd.cgroup_parent.trim_start_matches('/').to_string();
    let ctx = Ctx {
        socket: ctd.address().to_path_buf(),
        layout,
        top_rel,
        rmdir_limit: RMDIR_LIMIT,
    };
    measure(o, &ctd, &ctx, &mut hs, &mut study, progress);
    // Clean-up: pods first, then every cgroup under the bench's parent.
    progress.phase("kube: clean-up");
    for p in cri.list_pod_sandboxes().unwrap_or_default() {
        cri.remove_pod(&p.id);
    }
    study.cleanup_errors = ctx.layout.sweep(&parent_rel);
    study.log = crate::env::keep_log(&ctd.log, o.out_dir, "containerd-kube.log");
    study.handlers = hs;
    study
    // `ctd` drops here: containerd stops, its shims go, its dir is removed.
}

fn measure(
    o: &Options,
    ctd: &Containerd,
    ctx: &Ctx,
    hs: &mut [Handler],
    study: &mut KubeStudy,
    progress: &Progress,
) {
    if let Err(e) = ctx.layout.make(&ctx.top_rel) {
        study.note = format!("skipped: making the pods' parent: {e}");
        progress.inc(super::steps(o));
        return;
    }
    let tracer = Tracer::start(
        &format!("rund-bench-{}", ctd.namespace),
        &ctd.cgroup_parent,
        &ctd.dir.join("tracefs"),
    );
    study.trace = match &tracer {
        Ok(t) => t.describe(),
        Err(e) => format!("not counted: {e}"),
    };
    let counter = if ctx.layout.v2 {
        // The pods' parent alone: other work on the node stays out.
        ctx.layout.roots.first().map(|r| Counter::V2 {
            root: r.join(&ctx.top_rel),
        })
    } else {
        let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Counter::detect(&mi)
    };
    study.dying_method = match &counter {
        Some(c @ Counter::V1Memory { .. }) => {
            format!(
                "{} (node-wide: other work on the node counts too)",
                c.describe()
            )
        }
        Some(c) => c.describe(),
        None => "not counted: no memory cgroup found".into(),
    };
    let probes = Probes {
        tracer: tracer.as_ref().ok(),
        counter: counter.as_ref(),
        top: format!("/{}", ctx.top_rel),
        settle: o.settle,
    };
    study.supported = true;
    let mut serial = 0;
    // Warm-up (untimed): first shim of each kind, image snapshot, and the
    // proof that each rund handler runs with its own config.
    for h in hs.iter_mut() {
        progress.phase(format!("kube: warm-up {}", h.label));
        let quiet = Probes {
            tracer: None,
            counter: None,
            settle: Duration::ZERO,
            top: String::new(),
        };
        let warm = Level {
            n: 1,
            round: 0,
            count: 1,
        };
        let r = one_run(ctx, h, &warm, &mut serial, &quiet, progress);
        honoured(h, &r);
    }
    for (li, &n) in o.pods.iter().enumerate() {
        for (round, &count) in o.rounds_of(n).iter().enumerate() {
            // Reverse the order every other round (and level).
            let order: Vec<usize> = if (round + li) % 2 == 0 {
                (0..hs.len()).collect()
            } else {
                (0..hs.len()).rev().collect()
            };
            for k in order {
                let h = &mut hs[k];
                if interrupted() || h.skipped.is_some() {
                    progress.inc(count as u64);
                    continue;
                }
                progress.phase(format!("kube: {} N={n} round {round}", h.label));
                let level = Level { n, round, count };
                let r = one_run(ctx, h, &level, &mut serial, &probes, progress);
                if honoured(h, &r) {
                    study.runs.push(r);
                } else {
                    study.runs.retain(|x| x.handler != h.name);
                }
            }
        }
    }
}

/// A rund handler whose shim wrote no phase record for its running pods
/// did not run with its config: it is marked skipped, never filled in.
fn honoured(h: &mut Handler, r: &KubeRun) -> bool {
    let Some(p) = &r.phases else {
        return true;
    };
    if r.latencies_ms.is_empty() || !p.sandbox.records.is_empty() || !p.container.records.is_empty()
    {
        return true;
    }
    h.skipped = Some(format!(
        "the shim wrote no phase record to {} for {} running pod(s): its config (ConfigPath \
         in the handler's options) was not honoured",
        h.phases
            .as_deref()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
        r.latencies_ms.len()
    ));
    false
}

/// One run: `count` pods at level `n` (1: one after another).
#[derive(Clone, Copy)]
struct Level {
    n: usize,
    round: usize,
    count: usize,
}

fn one_run(
    ctx: &Ctx,
    h: &Handler,
    level: &Level,
    serial: &mut usize,
    probes: &Probes,
    progress: &Progress,
) -> KubeRun {
    let Level { n, round, count } = *level;
    *serial += 1;
    let pods: Vec<Pod> = (0..count)
        .map(|i| {
            let uid = format!("{:x}-{}-{i}", std::process::id(), *serial);
            Pod::new(ctx, &format!("kb-{}-{}-{i}", h.name, *serial), &uid)
        })
        .collect();
    if let Some(p) = &h.phases {
        phases::reset(p);
    }
    let lost0 = probes.tracer.map(|t| {
        let _ = t.clear();
        t.lost()
    });
    let mut r = KubeRun {
        handler: h.name.into(),
        n,
        round,
        pods: count,
        dying_before: probes.counter.and_then(Counter::count),
        ..Default::default()
    };
    let out = if n == 1 {
        pods::sequential(ctx, h.name, &pods, progress)
    } else {
        pods::burst(ctx, h.name, &pods, progress)
    };
    r.dying_after = probes.counter.and_then(Counter::count);
    if probes.counter.is_some() {
        progress.phase(format!("kube: {} N={n} settling", h.label));
        let end = Instant::now() + probes.settle;
        while Instant::now() < end && !interrupted() {
            std::thread::sleep(Duration::from_millis(200));
        }
        // Cut short by an interrupt: not a settled figure.
        if !interrupted() {
            r.dying_after_settle = probes.counter.and_then(Counter::count);
        }
    }
    if let (Some(t), Some(lost0)) = (probes.tracer, lost0) {
        let names: HashSet<String> = pods.iter().map(|p| p.dir.clone()).collect();
        let tids = cgroups::bench_tids();
        let scope = Scope {
            top: &probes.top,
            pods: &names,
            bench_tids: &tids,
        };
        r.ops = t
            .snapshot()
            .ok()
            .map(|text| ops::count(&text, &scope, t.lost().saturating_sub(lost0)));
    }
    r.phases = h.phases.as_deref().map(|p| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        phases::split(phases::parse(&text), &out.sandbox_ids, &out.container_ids)
    });
    r.latency = Summary::of(&out.latencies_ms);
    r.latencies_ms = out.latencies_ms;
    r.failures = out.failures;
    r.errors = out.errors;
    r.wall_ms = out.wall_ms;
    r.teardown_failures = out.teardown_failures;
    r.rmdir_failures = out.rmdir_failures;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::kube::phases::{PhaseSet, Record, RunPhases};

    fn rund() -> Handler {
        Handler {
            name: "rund-nopool",
            label: "rund pool off",
            config: Some("/c.toml".into()),
            phases: Some("/p.jsonl".into()),
            skipped: None,
        }
    }

    #[test]
    fn running_pods_without_phase_records_mean_the_config_was_not_honoured() {
        let mut h = rund();
        let mut r = KubeRun {
            latencies_ms: vec![100.0],
            phases: Some(RunPhases::default()),
            ..Default::default()
        };
        assert!(!honoured(&mut h, &r));
        assert!(h.skipped.as_deref().unwrap().contains("/p.jsonl"), "{h:?}");
        let mut h = rund();
        r.phases.as_mut().unwrap().container = PhaseSet::of(vec![Record {
            id: "c".into(),
            cgroup: 1.0,
            total: 2.0,
            cgroup_made: None,
        }]);
        assert!(honoured(&mut h, &r) && h.skipped.is_none());
        // No pod ran: nothing to judge by.
        let r = KubeRun {
            phases: Some(RunPhases::default()),
            ..Default::default()
        };
        assert!(honoured(&mut rund(), &r));
    }
}
