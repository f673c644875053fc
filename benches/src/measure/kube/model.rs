//! What the Kubernetes-shaped study records (serialised into results.json).

use serde::Serialize;

use super::handlers::Handler;
use super::ops::OpCounts;
use super::phases::RunPhases;
use crate::stats::Summary;

#[derive(Debug, Clone, Default, Serialize)]
pub struct KubeStudy {
    /// Whether anything was measured (else `note` says why).
    pub supported: bool,
    pub note: String,
    pub containerd: String,
    /// e.g. "cgroup v1 (hybrid): 9 hierarchies".
    pub layout: String,
    /// The pods' parent (cgroupfs form); each pod is `<parent>/pod<uid>`.
    pub pod_parent: String,
    pub handlers: Vec<Handler>,
    /// How cgroup operations were counted, or why they were not.
    pub trace: String,
    /// How dying cgroups were counted.
    pub dying_method: String,
    pub settle_s: u64,
    pub runs: Vec<KubeRun>,
    /// What the final clean-up could not remove.
    pub cleanup_errors: Vec<String>,
    /// Where containerd's log was kept (or why not).
    pub log: String,
}

/// One handler at one N, one round.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KubeRun {
    pub handler: String,
    pub n: usize,
    pub round: usize,
    /// Pods attempted.
    pub pods: usize,
    /// RunPodSandbox start to StartContainer returned, per running pod.
    pub latencies_ms: Vec<f64>,
    pub latency: Option<Summary>,
    pub failures: usize,
    pub errors: Vec<String>,
    /// N > 1 and nothing failed: release of all N to the last one running.
    pub wall_ms: Option<f64>,
    /// StopPodSandbox/RemovePodSandbox that failed (untimed).
    pub teardown_failures: usize,
    /// Pod cgroups the kubelet-like rmdir could not remove.
    pub rmdir_failures: usize,
    /// `None` when cgroup operations could not be traced.
    pub ops: Option<OpCounts>,
    pub dying_before: Option<i64>,
    pub dying_after: Option<i64>,
    pub dying_after_settle: Option<i64>,
    /// rund only.
    pub phases: Option<RunPhases>,
}

impl KubeRun {
    /// Dying cgroups added since `before`.
    pub fn dying_delta(&self, after: Option<i64>) -> Option<i64> {
        Some(after? - self.dying_before?)
    }
}
