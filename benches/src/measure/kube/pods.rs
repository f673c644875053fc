//! Kubelet-shaped pods through CRI: the pod cgroup made first, then
//! RunPodSandbox, CreateContainer and StartContainer of one busybox `sleep`
//! (timed together), and, untimed, StopPodSandbox, RemovePodSandbox and the
//! kubelet's rmdir of the pod cgroup.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rund_tests::{ContainerSpec, CriClient, PodSpec, BUSYBOX_IMAGE};

use super::cgroups::Layout;
use crate::measure::ms;
use crate::progress::Progress;
use crate::results::note_error;

/// Threads removing pods after a burst (the kubelet also tears down in parallel).
const TEARDOWN_THREADS: usize = 8;

/// What every pod of a run shares.
pub struct Ctx {
    pub socket: PathBuf,
    pub layout: Layout,
    /// The pods' parent, relative (`rit-x-pods/kubepods/besteffort`).
    pub top_rel: String,
    /// How long the kubelet-like rmdir retries a busy pod cgroup.
    pub rmdir_limit: Duration,
}

/// One pod to run.
#[derive(Clone)]
pub struct Pod {
    pub spec: PodSpec,
    /// The pod cgroup's directory name (`pod<uid>`).
    pub dir: String,
}

impl Pod {
    pub fn new(ctx: &Ctx, name: &str, uid: &str) -> Pod {
        let dir = format!("pod{uid}");
        let mut spec = PodSpec::new(name, &format!("/{}/{dir}", ctx.top_rel));
        spec.uid = uid.to_string();
        Pod { spec, dir }
    }

    fn rel(&self, ctx: &Ctx) -> String {
        format!("{}/{}", ctx.top_rel, self.dir)
    }
}

/// One pod's start.
#[derive(Default)]
struct Started {
    pod_id: Option<String>,
    ctr_id: Option<String>,
    result: Option<Result<f64, String>>,
}

/// A run's outcome, before the trace and the phase records are added.
#[derive(Default)]
pub struct Outcome {
    pub latencies_ms: Vec<f64>,
    pub failures: usize,
    pub errors: Vec<String>,
    /// N > 1: release of all N to the last StartContainer returning.
    pub wall_ms: Option<f64>,
    pub teardown_failures: usize,
    pub rmdir_failures: usize,
    pub sandbox_ids: HashSet<String>,
    pub container_ids: HashSet<String>,
}

impl Outcome {
    fn take(&mut self, s: &Started) {
        match &s.result {
            Some(Ok(ms)) => self.latencies_ms.push(*ms),
            Some(Err(e)) => {
                self.failures += 1;
                note_error(&mut self.errors, e.clone());
            }
            None => {
                self.failures += 1;
                note_error(&mut self.errors, "start thread panicked".into());
            }
        }
        self.sandbox_ids.extend(s.pod_id.clone());
        self.container_ids.extend(s.ctr_id.clone());
    }
}

fn start(cri: &CriClient, handler: &str, pod: &PodSpec) -> Started {
    let mut s = Started::default();
    let t0 = Instant::now();
    let r = (|| {
        let pod_id = cri
            .run_pod_sandbox(pod, handler)
            .map_err(|e| format!("RunPodSandbox: {e}"))?;
        s.pod_id = Some(pod_id.clone());
        let c = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "100000"]);
        let id = cri
            .create_container(&pod_id, &c, pod)
            .map_err(|e| format!("CreateContainer: {e}"))?;
        s.ctr_id = Some(id.clone());
        cri.start_container(&id)
            .map_err(|e| format!("StartContainer: {e}"))?;
        Ok(ms(t0.elapsed()))
    })();
    s.result = Some(r);
    s
}

/// Untimed: StopPodSandbox, RemovePodSandbox (best-effort removal of
/// whatever is left on failure), then the pod cgroup's rmdir.
fn teardown(cri: &CriClient, ctx: &Ctx, pod: &Pod, s: &Started, out: &Teardown) {
    let pod_id = s.pod_id.clone().or_else(|| {
        // A failed RunPodSandbox may leave a NOTREADY sandbox behind.
        cri.list_pod_sandboxes().ok()?.into_iter().find_map(|p| {
            p.metadata
                .as_ref()
                .is_some_and(|m| m.uid == pod.spec.uid)
                .then_some(p.id)
        })
    });
    if let Some(id) = pod_id {
        let r = cri
            .stop_pod_sandbox(&id)
            .map_err(|e| format!("StopPodSandbox: {e}"))
            .and_then(|()| {
                cri.remove_pod_sandbox(&id)
                    .map_err(|e| format!("RemovePodSandbox: {e}"))
            });
        if let Err(e) = r {
            cri.remove_pod(&id);
            out.fail(&out.teardown, e);
        }
    }
    if let Err(e) = ctx.layout.remove(&pod.rel(ctx), ctx.rmdir_limit) {
        out.fail(&out.rmdir, format!("pod cgroup: {e}"));
    }
}

#[derive(Default)]
struct Teardown {
    teardown: AtomicUsize,
    rmdir: AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

impl Teardown {
    fn fail(&self, count: &AtomicUsize, e: String) {
        count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut v) = self.errors.lock() {
            note_error(&mut v, e);
        }
    }

    fn into(self, out: &mut Outcome) {
        out.teardown_failures = self.teardown.into_inner();
        out.rmdir_failures = self.rmdir.into_inner();
        for e in self.errors.into_inner().unwrap_or_default() {
            note_error(&mut out.errors, e);
        }
    }
}

fn connect(ctx: &Ctx) -> Result<CriClient, String> {
    CriClient::connect(&ctx.socket).map_err(|e| format!("CRI connect: {e}"))
}

/// N = 1: each pod made, started, torn down before the next.
pub fn sequential(ctx: &Ctx, handler: &str, pods: &[Pod], progress: &Progress) -> Outcome {
    let mut out = Outcome::default();
    let td = Teardown::default();
    let cri = match connect(ctx) {
        Ok(c) => c,
        Err(e) => return failed_all(pods.len(), e, progress),
    };
    for pod in pods {
        if crate::progress::interrupted() {
            break;
        }
        let s = match ctx.layout.make(&pod.rel(ctx)) {
            Ok(()) => start(&cri, handler, &pod.spec),
            Err(e) => Started {
                result: Some(Err(format!("making the pod cgroup: {e}"))),
                ..Default::default()
            },
        };
        out.take(&s);
        teardown(&cri, ctx, pod, &s, &td);
        progress.inc(1);
    }
    td.into(&mut out);
    out
}

fn failed_all(n: usize, e: String, progress: &Progress) -> Outcome {
    progress.inc(n as u64);
    let mut out = Outcome {
        failures: n,
        ..Default::default()
    };
    note_error(&mut out.errors, e);
    out
}

/// N > 1: all pod cgroups and CRI connections made first (untimed), then N
/// threads released by one barrier; wall time runs from the release to the
/// last StartContainer returning.
pub fn burst(ctx: &Ctx, handler: &str, pods: &[Pod], progress: &Progress) -> Outcome {
    let mut out = Outcome::default();
    for pod in pods {
        if let Err(e) = ctx.layout.make(&pod.rel(ctx)) {
            let td = Teardown::default();
            for p in pods {
                if let Err(e) = ctx.layout.remove(&p.rel(ctx), Duration::ZERO) {
                    td.fail(&td.rmdir, e);
                }
            }
            let mut out = failed_all(pods.len(), format!("making the pod cgroups: {e}"), progress);
            td.into(&mut out);
            return out;
        }
    }
    let clients: Result<Vec<CriClient>, String> = pods.iter().map(|_| connect(ctx)).collect();
    let clients = match clients {
        Ok(c) => c,
        Err(e) => {
            let mut out = failed_all(pods.len(), e, progress);
            let td = Teardown::default();
            for p in pods {
                if let Err(e) = ctx.layout.remove(&p.rel(ctx), Duration::ZERO) {
                    td.fail(&td.rmdir, e);
                }
            }
            td.into(&mut out);
            return out;
        }
    };
    let gate = Arc::new(Barrier::new(pods.len() + 1));
    let handles: Vec<_> = clients
        .into_iter()
        .zip(pods)
        .map(|(cri, pod)| {
            let (gate, spec, handler) = (gate.clone(), pod.spec.clone(), handler.to_string());
            std::thread::spawn(move || {
                gate.wait();
                let t0 = Instant::now();
                let s = start(&cri, &handler, &spec);
                (s, t0, Instant::now(), cri)
            })
        })
        .collect();
    gate.wait();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut started = Vec::with_capacity(pods.len());
    let mut clients = Vec::new();
    for h in handles {
        match h.join() {
            Ok((s, t0, end, cri)) => {
                first = Some(first.map_or(t0, |f| f.min(t0)));
                last = Some(last.map_or(end, |l| l.max(end)));
                started.push(s);
                clients.push(cri);
            }
            Err(_) => started.push(Started::default()),
        }
        progress.inc(1);
    }
    for s in &started {
        out.take(s);
    }
    if let (Some(f), Some(l), 0) = (first, last, out.failures) {
        out.wall_ms = Some(ms(l - f));
    }
    parallel_teardown(ctx, pods, &started, clients, &mut out);
    out
}

fn parallel_teardown(
    ctx: &Ctx,
    pods: &[Pod],
    started: &[Started],
    mut clients: Vec<CriClient>,
    out: &mut Outcome,
) {
    let td = Teardown::default();
    let next = AtomicUsize::new(0);
    let workers = TEARDOWN_THREADS.min(pods.len()).max(1);
    clients.truncate(workers);
    while clients.len() < workers {
        match connect(ctx) {
            Ok(c) => clients.push(c),
            Err(e) if clients.is_empty() => {
                for p in pods {
                    let _ = ctx.layout.remove(&p.rel(ctx), Duration::ZERO);
                }
                td.fail(&td.teardown, e);
                td.into(out);
                return;
            }
            Err(_) => break,
        }
    }
    std::thread::scope(|sc| {
        for cri in &clients {
            let (td, next) = (&td, &next);
            sc.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let (Some(pod), Some(s)) = (pods.get(i), started.get(i)) else {
                    break;
                };
                teardown(cri, ctx, pod, s, td);
            });
        }
    });
    td.into(out);
}
