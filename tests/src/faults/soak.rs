//! The soak (`make soak`): many create/exec/delete cycles of containers in one CRI pod (one
//! long-lived shim), then many pods at once through ctr. It records every failure, each cycle's
//! latency, and samples of containerd's and the shim's fds, RSS and threads and of the node's
//! dying memcgs over time, and prints them as tables.

use std::time::{Duration, Instant};

use super::probe::{dying_memcgs, fd_count, rss_kib, thread_count};
use super::FaultEnv;
use crate::containerd::RunSpec;
use crate::cri::{ContainerSpec, CriClient, PodSpec};
use crate::image::BUSYBOX_IMAGE;

/// One sample of the processes that live through the soak.
#[derive(Debug, Clone)]
pub struct Sample {
    pub cycle: usize,
    pub containerd_fds: usize,
    pub containerd_rss_kib: usize,
    pub shim_fds: usize,
    pub shim_rss_kib: usize,
    pub shim_threads: usize,
    /// The pod's sandbox agent.
    pub agent_fds: usize,
    pub agent_rss_kib: usize,
    pub dying_memcgs: Option<i64>,
}

impl Sample {
    fn take(cycle: usize, containerd: u32, shim: u32) -> Sample {
        let agent = crate::shim::residue::agents_of(shim)
            .first()
            .copied()
            .unwrap_or(0);
        Sample {
            cycle,
            containerd_fds: fd_count(containerd).unwrap_or(0),
            containerd_rss_kib: rss_kib(containerd).unwrap_or(0),
            shim_fds: fd_count(shim).unwrap_or(0),
            shim_rss_kib: rss_kib(shim).unwrap_or(0),
            shim_threads: thread_count(shim).unwrap_or(0),
            agent_fds: fd_count(agent).unwrap_or(0),
            agent_rss_kib: rss_kib(agent).unwrap_or(0),
            dying_memcgs: dying_memcgs(),
        }
    }
}

/// What the cycles did.
#[derive(Debug, Default)]
pub struct Cycles {
    /// Wall time of each successful cycle, in ms.
    pub latencies_ms: Vec<f64>,
    pub failures: Vec<String>,
    pub samples: Vec<Sample>,
}

/// `n` cycles of CreateContainer, StartContainer, ExecSync, StopContainer, RemoveContainer in
/// pod `pod_id` (served by `shim`), sampling every `every` cycles.
pub fn cycles(
    env: &FaultEnv,
    cri: &CriClient,
    pod: &PodSpec,
    pod_id: &str,
    shim: u32,
    n: usize,
    every: usize,
) -> Cycles {
    let containerd = env.ctd.pid().unwrap_or(0);
    let mut out = Cycles::default();
    out.samples.push(Sample::take(0, containerd, shim));
    for i in 1..=n {
        let t0 = Instant::now();
        match one_cycle(cri, pod, pod_id, i) {
            Ok(()) => out.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3),
            Err(e) => out.failures.push(format!("cycle {i}: {e}")),
        }
        if i % every == 0 || i == n {
            out.samples.push(Sample::take(i, containerd, shim));
        }
    }
    out
}

fn one_cycle(cri: &CriClient, pod: &PodSpec, pod_id: &str, i: usize) -> Result<(), String> {
    let spec = ContainerSpec::new(&format!("soak-{i}"), BUSYBOX_IMAGE, &["sleep", "100000"]);
    let id = cri
        .create_and_start(pod_id, &spec, pod)
        .map_err(|e| e.to_string())?;
    let res = cri
        .exec_sync(&id, &["echo", "soak"], 30)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            (r.exit_code == 0 && r.stdout == b"soak\n")
                .then_some(())
                .ok_or(format!("exec: {r:?}"))
        });
    cri.stop_container(&id, 0).map_err(|e| e.to_string())?;
    cri.remove_container(&id).map_err(|e| e.to_string())?;
    res
}

/// What the concurrent pods did.
#[derive(Debug, Default)]
pub struct Concurrent {
    pub latencies_ms: Vec<f64>,
    pub failures: Vec<String>,
    pub wall: Duration,
}

/// `n` pods at once, each `ctr run -d`, `ctr task exec`, kill, delete.
pub fn concurrent(env: &FaultEnv, n: usize) -> Concurrent {
    let t0 = Instant::now();
    let results: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| s.spawn(move || one_pod(env, &format!("burst-{i}"))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    let mut out = Concurrent {
        wall: t0.elapsed(),
        ..Default::default()
    };
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(ms) => out.latencies_ms.push(ms),
            Err(e) => out.failures.push(format!("pod {i}: {e}")),
        }
    }
    out
}

fn one_pod(env: &FaultEnv, id: &str) -> Result<f64, String> {
    let t0 = Instant::now();
    let ctd = &env.ctd;
    let spec = RunSpec {
        detach: true,
        ..env.spec(id, &["sleep", "100000"])
    };
    let res = (|| {
        ctd.run_spec(&spec)
            .and_then(|o| o.check())
            .map_err(|e| e.to_string())?;
        let out = ctd
            .task_exec(id, "x", &["echo", "burst"], None)
            .map_err(|e| e.to_string())?;
        if out.code() != 0 || out.stdout != "burst\n" {
            return Err(format!("exec: {out:?}"));
        }
        Ok(())
    })();
    ctd.remove_container(id);
    ctd.wait_for_status(id, "absent", Duration::from_secs(120))
        .map_err(|e| e.to_string())?;
    res.map(|()| t0.elapsed().as_secs_f64() * 1e3)
}

pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// First `k` and last `k` cycles' mean and median latency, and last/first of the means.
pub fn first_last(lat: &[f64], k: usize) -> String {
    let k = k.min(lat.len() / 2).max(1);
    let (first, last) = (&lat[..k], &lat[lat.len() - k..]);
    format!(
        "first {k}: mean {:.1} ms, median {:.1} ms | last {k}: mean {:.1} ms, median {:.1} ms | \
         last/first mean {:.3}, median {:.3}",
        mean(first),
        median(first),
        mean(last),
        median(last),
        mean(last) / mean(first),
        median(last) / median(first)
    )
}

/// The samples as a table.
pub fn samples_table(samples: &[Sample]) -> String {
    let mut t = String::from(
        "cycle  containerd_fds  containerd_rss_KiB  shim_fds  shim_rss_KiB  shim_threads  \
         agent_fds  agent_rss_KiB  dying_memcgs\n",
    );
    for s in samples {
        t.push_str(&format!(
            "{:>5}  {:>14}  {:>18}  {:>8}  {:>12}  {:>12}  {:>9}  {:>13}  {:>12}\n",
            s.cycle,
            s.containerd_fds,
            s.containerd_rss_kib,
            s.shim_fds,
            s.shim_rss_kib,
            s.shim_threads,
            s.agent_fds,
            s.agent_rss_kib,
            s.dying_memcgs.map(|d| d.to_string()).unwrap_or("-".into())
        ));
    }
    t
}
