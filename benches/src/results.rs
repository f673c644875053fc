//! What a bench run produces, serialised as target/bench/results.json.
//! Raw samples are kept next to every summary so figures can be re-derived.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpu::CpuSplit;
use crate::procfs::{Mem, MemKind};
use crate::runtime::RuntimeKind;
use crate::stats::Summary;

/// Distinct error messages kept per sample set (the count is always exact).
const MAX_ERRORS: usize = 5;

#[derive(Debug, Clone, Default, Serialize)]
pub struct SampleSet {
    pub samples_ms: Vec<f64>,
    pub failures: u32,
    pub errors: Vec<String>,
    pub summary: Option<Summary>,
}

impl SampleSet {
    pub fn ok(&mut self, ms: f64) {
        self.samples_ms.push(ms);
        self.summary = Summary::of(&self.samples_ms);
    }

    pub fn fail(&mut self, err: String) {
        self.failures += 1;
        note_error(&mut self.errors, err);
    }
}

pub fn note_error(errors: &mut Vec<String>, err: String) {
    if errors.len() < MAX_ERRORS && !errors.contains(&err) {
        errors.push(err);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Teardown {
    /// Wall time to kill and delete all started containers.
    pub wall_ms: f64,
    pub failures: u32,
    pub errors: Vec<String>,
}

/// Memory of the per-pod infrastructure, summed over all pods found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Density {
    /// Pods (tasks) whose shim was found from the task pid.
    pub pods: usize,
    /// Running tasks whose shim could not be found.
    pub unresolved: usize,
    pub shim_processes: usize,
    /// Agent and container-init processes (rund); 0 for runc-v2.
    pub infra_processes: usize,
    pub shim_total: Mem,
    /// Agent and inits together (everything below the shim but the workload).
    pub infra_total: Mem,
    /// The shim's direct children (rund's agents), part of `infra_total`.
    pub agent_processes: usize,
    pub agent_total: Mem,
    /// Threads of all shims found.
    pub shim_threads: usize,
}

impl Density {
    /// Per-pod KiB as (shim, agent+inits, total).
    pub fn per_pod(&self, kind: MemKind) -> Option<(f64, f64, f64)> {
        if self.pods == 0 {
            return None;
        }
        let pick = |m: &Mem| kind.of(m) as f64;
        let n = self.pods as f64;
        let s = pick(&self.shim_total) / n;
        let i = pick(&self.infra_total) / n;
        Some((s, i, s + i))
    }

    /// Per-pod KiB of the agent alone and of the inits alone.
    pub fn per_pod_split(&self, kind: MemKind) -> Option<(f64, f64)> {
        if self.pods == 0 {
            return None;
        }
        let pick = |m: &Mem| kind.of(m) as f64;
        let n = self.pods as f64;
        let a = pick(&self.agent_total);
        Some((a / n, (pick(&self.infra_total) - a) / n))
    }

    /// Adds another measure's pods (rounds pool).
    pub fn add(&mut self, d: &Density) {
        self.pods += d.pods;
        self.unresolved += d.unresolved;
        self.shim_processes += d.shim_processes;
        self.infra_processes += d.infra_processes;
        self.shim_total += d.shim_total;
        self.infra_total += d.infra_total;
        self.agent_processes += d.agent_processes;
        self.agent_total += d.agent_total;
        self.shim_threads += d.shim_threads;
    }
}

/// Idle pods of one runtime: started one by one, left alone, then weighed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IdleSet {
    /// Pods asked for.
    pub pods: usize,
    /// How long the pods were left idle before the measure.
    pub settle_ms: u64,
    pub failures: usize,
    pub errors: Vec<String>,
    pub density: Option<Density>,
    /// After the weighing: the shims' CPU time when polled (`measure/polls.rs`).
    #[serde(default)]
    pub polls: Vec<PollCost>,
}

/// The CPU time idle shims spend on State polls spaced `gap_ms` apart.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PollCost {
    pub gap_ms: u64,
    /// Polls that answered (one `ctr task ls` each).
    pub polls: usize,
    pub shims: usize,
    /// Mean CPU time of one shim per poll, µs.
    pub cpu_us_per_poll: Option<f64>,
    /// Shims or threads gone before the series ended: their time is not counted.
    pub threads_ended: usize,
    /// Mean RSS of one shim one spacing after the series' last poll, KiB.
    #[serde(default)]
    pub rss_kib_after: Option<f64>,
}

/// rund per-node against per-pod mode and runc-v2, N idle pods each.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeStudy {
    pub rows: Vec<NodeRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub pods: usize,
    pub handler: String,
    pub set: IdleSet,
}

/// RunPodSandbox through CRI on containerd 2.1, per handler.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CriStudy {
    pub supported: bool,
    pub note: String,
    pub containerd: String,
    /// Handler name -> what it is (sandboxer, runtime).
    pub handlers: BTreeMap<String, String>,
    /// Handler name -> RunPodSandbox latencies.
    pub run_pod_sandbox: BTreeMap<String, SampleSet>,
    /// The first pod of each handler, not in the figures.
    pub warmup: BTreeMap<String, SampleSet>,
    /// Pods whose StopPodSandbox/RemovePodSandbox failed (never timed).
    pub teardown_failures: usize,
    /// Where containerd's log was kept (or why not).
    pub log: String,
    /// rund handlers: the shim's own time per pod.
    pub own: BTreeMap<String, OwnTime>,
}

/// The shim's Create of a pod's sandbox (its `[trace] phases_file` record).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OwnTime {
    pub create: SampleSet,
    /// Phase name -> its times over the samples (ms).
    pub phases: BTreeMap<String, Vec<f64>>,
    /// Pods whose sandbox was a claimed warm agent.
    pub warm_claims: usize,
    /// Pods without a record.
    pub missing: usize,
}

/// What drove containerd in a timed measure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    /// A `ctr` process per operation (the main comparison).
    #[default]
    Ctr,
    /// containerd's client API over one long-lived connection.
    Api,
}

impl Client {
    /// For progress lines and notes; the `ctr` runs keep their plain names.
    pub fn suffix(self) -> &'static str {
        match self {
            Client::Ctr => "",
            Client::Api => " (API)",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ConcurrentRun {
    pub runtime: RuntimeKind,
    /// Feature-switch variant ("on"/"off"), `None` in the main comparison.
    pub variant: Option<String>,
    pub client: Client,
    pub n: usize,
    pub round: usize,
    /// From the common start to the last `ctr run -d` returning. Only a
    /// figure of "all running" when `failures == 0`; reports ignore it otherwise.
    pub wall_ms: f64,
    /// `ctr run -d` that reported success.
    pub started: usize,
    /// Tasks seen RUNNING by `ctr task ls` right after.
    pub running: usize,
    pub errors: Vec<String>,
    /// Containers not RUNNING afterwards (ctr error or task already gone).
    pub failures: usize,
    /// Per-container `ctr run -d` latency of the containers that are RUNNING.
    pub latencies_ms: Vec<f64>,
    pub latency: Option<Summary>,
    pub density: Option<Density>,
    pub teardown: Option<Teardown>,
    /// CPU per pod from the release of the burst to its last start
    /// returning, by who spent it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_start: Option<CpuSplit>,
    /// The same for the teardown burst.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_teardown: Option<CpuSplit>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StopSet {
    /// Time from `kill -s TERM` to the task's exit event, capped.
    pub samples_ms: Vec<f64>,
    /// Per sample: the cap was hit and KILL was needed.
    pub capped: Vec<bool>,
    pub exit_status: Vec<Option<i64>>,
    pub failures: u32,
    pub errors: Vec<String>,
    pub summary: Option<Summary>,
}

impl StopSet {
    pub fn capped_count(&self) -> usize {
        self.capped.iter().filter(|c| **c).count()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FeatureResult {
    /// e.g. "userns", "cgroup-pool".
    pub feature: String,
    /// Variant labels, e.g. ["on", "off"].
    pub variants: [String; 2],
    pub config_paths: [String; 2],
    pub supported: bool,
    pub note: String,
    pub single_start: [SampleSet; 2],
    pub concurrent: [Vec<ConcurrentRun>; 2],
}

/// The cgroup pool on against off at one N.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolLevel {
    /// "on" or "off".
    pub variant: String,
    pub n: usize,
    /// Runs pooled here (each: N starts at once; N = 1: the whole series).
    pub runs: usize,
    /// ctr's end-to-end time per container (N = 1: `run --rm`; else `run -d`).
    pub start_ms: Vec<f64>,
    pub start: Option<Summary>,
    /// N > 1: from the release of all N to the last start returning, per
    /// run without failures.
    pub walls_ms: Vec<f64>,
    pub failures: usize,
    pub errors: Vec<String>,
    /// From the shim's phase records, one value per Create.
    pub cgroup_ms: Vec<f64>,
    pub cgroup: Option<Summary>,
    /// CPU time of the cgroup step (the work, without waiting for a CPU).
    pub cgroup_cpu_ms: Vec<f64>,
    pub cgroup_cpu: Option<Summary>,
    /// Wall time of the cgroup step itself (`extra.cgroup_made`: the claim
    /// or the mkdirs, beside the sandbox's launch), per Create that has it.
    pub cgroup_made_ms: Vec<f64>,
    pub place_ms: Vec<f64>,
    pub create_ms: Vec<f64>,
    pub place: Option<Summary>,
    pub create: Option<Summary>,
}

/// Dying memcgs left by create/delete cycles with one variant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DyingRun {
    pub variant: String,
    pub cycles: usize,
    pub failures: usize,
    pub errors: Vec<String>,
    /// How dying cgroups were counted on this host.
    pub method: String,
    pub before: Option<i64>,
    pub after: Option<i64>,
}

impl DyingRun {
    /// Dying cgroups the cycles added (`None` when the count is unknown).
    pub fn added(&self) -> Option<i64> {
        Some(self.after? - self.before?)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolStudy {
    pub supported: bool,
    pub note: String,
    /// The cgroupsPath parent the pool serves (`/<namespace>`).
    pub parent: String,
    pub config_paths: [String; 2],
    pub levels: Vec<PoolLevel>,
    pub dying: Vec<DyingRun>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Meta {
    pub started_at_unix: u64,
    pub kernel: String,
    pub cpus: usize,
    pub containerd: String,
    pub runc: String,
    pub quick: bool,
    pub iterations: usize,
    pub warmup: usize,
    pub concurrency: Vec<usize>,
    pub rounds: usize,
    pub stop_samples: usize,
    pub stop_cap_s: u64,
    pub runtimes: Vec<RuntimeKind>,
    pub rund_bin_dir: Option<String>,
    pub duration_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    pub figure: String,
    pub unit: String,
    pub rund: Option<f64>,
    pub runc: Option<f64>,
    pub ratio: Option<f64>,
    /// The value is a lower bound (a cap was hit): rendered as "≥ x".
    pub rund_at_least: bool,
    pub runc_at_least: bool,
    /// The same figure for the no-op shim (containerd + ctr alone), if measured.
    pub floor: Option<f64>,
    pub note: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Results {
    pub meta: Meta,
    /// Keyed by runtime label.
    pub warmup: BTreeMap<String, SampleSet>,
    pub single_start: BTreeMap<String, SampleSet>,
    /// Keyed by runtime label: CPU per `run --rm` cycle, by who spent it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub single_cpu: BTreeMap<String, CpuSplit>,
    /// The same single start through containerd's client API.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub api_single_start: BTreeMap<String, SampleSet>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub api_single_cpu: BTreeMap<String, CpuSplit>,
    /// Both clients' runs (`client`).
    pub concurrent: Vec<ConcurrentRun>,
    pub stop: BTreeMap<String, StopSet>,
    /// Keyed by runtime label.
    pub idle: BTreeMap<String, IdleSet>,
    pub cri: Option<CriStudy>,
    pub features: Vec<FeatureResult>,
    pub pool: Option<PoolStudy>,
    /// Kubernetes-shaped pods through CRI (pod cgroups as the kubelet makes them).
    pub kube: Option<crate::measure::kube::KubeStudy>,
    /// rund per-node against per-pod mode (idle pods at N).
    pub node: Option<NodeStudy>,
    pub notes: Vec<String>,
    pub table: Vec<TableRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_pod_splits_agent_from_inits() {
        let mut d = Density {
            pods: 2,
            infra_processes: 3,
            infra_total: Mem {
                rss_kib: 1000,
                pss_kib: 400,
                anon_kib: 200,
            },
            agent_processes: 2,
            agent_total: Mem {
                rss_kib: 800,
                pss_kib: 300,
                anon_kib: 100,
            },
            ..Default::default()
        };
        assert_eq!(d.per_pod_split(MemKind::Rss), Some((400.0, 100.0)));
        assert_eq!(d.per_pod_split(MemKind::Pss), Some((150.0, 50.0)));
        assert_eq!(d.per_pod_split(MemKind::Anon), Some((50.0, 50.0)));
        let other = d.clone();
        d.add(&other);
        assert_eq!(d.pods, 4);
        assert_eq!(d.per_pod_split(MemKind::Rss), Some((400.0, 100.0)));
        assert_eq!(Density::default().per_pod_split(MemKind::Rss), None);
    }
}
