//! Command-line flags and the plan they resolve to.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::runtime::RuntimeKind;

/// rund against runc-v2, side by side on one private containerd 1.6.
#[derive(Debug, Parser)]
#[command(name = "rund-bench", version)]
pub struct Args {
    /// Fewer samples (make bench-quick, < 5 min on 2 cores): 10 single starts,
    /// 1 warm-up, concurrency 50, 1 stop sample, 5 samples per feature
    /// variant, 3 idle pods, 6 RunPodSandbox per CRI handler.
    #[arg(long)]
    pub quick: bool,
    /// Single-start samples per runtime (default 30, quick 10).
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Warm-up runs per runtime, not counted (default 3, quick 1).
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Concurrency levels N (default 50,200; quick 50).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// Concurrent-start rounds per runtime and N; rounds alternate the order
    /// and the table takes the median. Default: 3 in the main comparison
    /// (one burst of 200 on a shared 2-core machine varies by up to 2× from
    /// run to run), 2 in the pool study (pool on first, then off first) and
    /// 1 in the Kubernetes study; quick 1.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Stop-latency samples per runtime (default 3, quick 1).
    #[arg(long)]
    pub stop_samples: Option<usize>,
    /// Grace cap before KILL in the stop-latency measure, seconds.
    #[arg(long, default_value_t = 10)]
    pub stop_cap: u64,
    /// Runtimes to measure.
    #[arg(long, value_delimiter = ',', default_value = "rund,runc")]
    pub runtimes: Vec<RuntimeKind>,
    #[arg(long)]
    pub skip_single: bool,
    #[arg(long)]
    pub skip_concurrent: bool,
    /// Skip the RSS/PSS measure (taken while the N concurrent containers sleep).
    #[arg(long)]
    pub skip_density: bool,
    #[arg(long)]
    pub skip_stop: bool,
    /// Skip the floor: the bench's no-op shim measured alongside in the
    /// single and concurrent phases (containerd + ctr + a shim process).
    #[arg(long)]
    pub skip_floor: bool,
    /// Skip the idle-pod memory measure.
    #[arg(long)]
    pub skip_idle: bool,
    /// Pods per runtime for the idle memory measure (default 5, quick 3).
    #[arg(long)]
    pub idle_pods: Option<usize>,
    /// Skip the CRI RunPodSandbox phase (containerd 2.1 from the cache).
    #[arg(long)]
    pub skip_cri: bool,
    /// RunPodSandbox samples per handler (default 20, quick 6).
    #[arg(long)]
    pub cri_pods: Option<usize>,
    /// Skip rund's feature switches (userns on/off).
    #[arg(long)]
    pub skip_features: bool,
    /// Skip the cgroup pool study (cgroup phase at 1 and each N, dying memcgs).
    #[arg(long)]
    pub skip_pool: bool,
    /// Create/delete cycles per variant for the dying-memcg count
    /// (default 1000, quick 100; 0 skips it).
    #[arg(long)]
    pub pool_cycles: Option<usize>,
    /// Skip the Kubernetes-shaped study (CRI pods, each with its own pod
    /// cgroup; runc-v2, rund pool on, rund pool off).
    #[arg(long)]
    pub skip_kube: bool,
    /// Pod counts N for the Kubernetes-shaped study: 1 runs pods one after
    /// another, larger N all at once (default 1,50,200; quick 1,50).
    #[arg(long, value_delimiter = ',')]
    pub kube_pods: Option<Vec<usize>>,
    /// Kubernetes-shaped study, N = 1: pods per handler (default 10, quick 4).
    #[arg(long)]
    pub kube_samples: Option<usize>,
    /// Kubernetes-shaped study: seconds before dying cgroups are counted
    /// again after a run (default 10, quick 5).
    #[arg(long)]
    pub kube_settle: Option<u64>,
    /// Skip the single and concurrent starts through containerd's client
    /// API (one connection, no ctr process per operation).
    #[arg(long)]
    pub skip_api: bool,
    /// Skip the per-node study (rund per-node against per-pod mode and
    /// runc-v2, N idle pods each).
    #[arg(long)]
    pub skip_node: bool,
    /// Pod counts N for the per-node study (default 50,200; quick 20).
    #[arg(long, value_delimiter = ',')]
    pub node_pods: Option<Vec<usize>>,
    /// Samples per variant for the feature switches (default 10, quick 5).
    #[arg(long)]
    pub feature_iterations: Option<usize>,
    /// Config file for one feature variant, `<feature>-<variant>=PATH`
    /// (userns-on, userns-off); repeatable.
    #[arg(long = "feature-config", value_parser = parse_kv)]
    pub feature_config: Vec<(String, PathBuf)>,
    /// Where results.json and plot.svg go.
    #[arg(long, default_value = "target/bench")]
    pub out_dir: PathBuf,
    /// Kill a single ctr invocation after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub ctr_timeout: u64,
    /// containerd (and shims) at debug log level.
    #[arg(long)]
    pub debug: bool,
}

fn parse_kv(s: &str) -> Result<(String, PathBuf), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, got {s:?}"))?;
    Ok((k.to_string(), PathBuf::from(v)))
}

/// Every knob resolved.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    pub iterations: usize,
    pub warmup: usize,
    pub concurrency: Vec<usize>,
    /// Rounds of the main comparison's concurrent starts.
    pub rounds: usize,
    /// Rounds of each burst in the Kubernetes study.
    pub study_rounds: usize,
    /// Rounds of each burst in the pool study.
    pub pool_rounds: usize,
    pub stop_samples: usize,
    pub stop_cap: Duration,
    pub runtimes: Vec<RuntimeKind>,
    pub single: bool,
    pub concurrent: bool,
    /// The single and concurrent starts again through the client API.
    pub api: bool,
    pub density: bool,
    pub stop: bool,
    pub features: bool,
    pub pool: bool,
    pub floor: bool,
    pub idle: bool,
    pub idle_pods: usize,
    pub cri: bool,
    pub cri_pods: usize,
    pub pool_cycles: usize,
    pub kube: bool,
    pub kube_pods: Vec<usize>,
    pub node: bool,
    pub node_pods: Vec<usize>,
    pub kube_samples: usize,
    pub kube_settle: Duration,
    pub feature_iterations: usize,
    pub feature_configs: BTreeMap<String, PathBuf>,
    pub out_dir: PathBuf,
    pub ctr_timeout: Duration,
    pub debug: bool,
}

impl Args {
    pub fn plan(self) -> Result<Plan, String> {
        let q = self.quick;
        let mut runtimes = self.runtimes;
        runtimes.sort();
        runtimes.dedup();
        if runtimes.is_empty() {
            return Err("--runtimes must name at least one runtime".into());
        }
        let mut concurrency =
            self.concurrency
                .unwrap_or_else(|| if q { vec![50] } else { vec![50, 200] });
        concurrency.sort_unstable();
        concurrency.dedup();
        if concurrency.contains(&0) {
            return Err("--concurrency values must be > 0".into());
        }
        let rounds = self.rounds.unwrap_or(if q { 1 } else { 3 });
        let study_rounds = self.rounds.unwrap_or(1);
        // One round each would always run the pool's burst first.
        let pool_rounds = self.rounds.unwrap_or(if q { 1 } else { 2 });
        if rounds == 0 {
            return Err("--rounds must be > 0".into());
        }
        let mut kube_pods =
            self.kube_pods
                .unwrap_or_else(|| if q { vec![1, 50] } else { vec![1, 50, 200] });
        kube_pods.sort_unstable();
        kube_pods.dedup();
        if kube_pods.is_empty() || kube_pods.contains(&0) {
            return Err("--kube-pods values must be > 0".into());
        }
        let mut node_pods = self
            .node_pods
            .unwrap_or_else(|| if q { vec![20] } else { vec![50, 200] });
        node_pods.sort_unstable();
        node_pods.dedup();
        if node_pods.is_empty() || node_pods.contains(&0) {
            return Err("--node-pods values must be > 0".into());
        }
        let both = runtimes.contains(&RuntimeKind::Rund) && runtimes.contains(&RuntimeKind::Runc);
        let features = !self.skip_features && runtimes.contains(&RuntimeKind::Rund);
        let pool = !self.skip_pool && runtimes.contains(&RuntimeKind::Rund);
        Ok(Plan {
            quick: q,
            iterations: self.iterations.unwrap_or(if q { 10 } else { 30 }),
            warmup: self.warmup.unwrap_or(if q { 1 } else { 3 }),
            concurrency,
            rounds,
            study_rounds,
            pool_rounds,
            stop_samples: self.stop_samples.unwrap_or(if q { 1 } else { 3 }),
            stop_cap: Duration::from_secs(self.stop_cap),
            runtimes,
            single: !self.skip_single,
            concurrent: !self.skip_concurrent,
            api: !(self.skip_api || self.skip_single && self.skip_concurrent),
            density: !self.skip_density && !self.skip_concurrent,
            stop: !self.skip_stop,
            features,
            pool,
            floor: !self.skip_floor,
            idle: !self.skip_idle,
            idle_pods: self.idle_pods.unwrap_or(if q { 3 } else { 5 }).max(1),
            cri: !self.skip_cri,
            cri_pods: self.cri_pods.unwrap_or(if q { 6 } else { 20 }).max(1),
            pool_cycles: self.pool_cycles.unwrap_or(if q { 100 } else { 1000 }),
            kube: !self.skip_kube,
            kube_pods,
            node: !self.skip_node && both,
            node_pods,
            kube_samples: self.kube_samples.unwrap_or(if q { 4 } else { 10 }).max(1),
            kube_settle: Duration::from_secs(self.kube_settle.unwrap_or(if q { 5 } else { 10 })),
            feature_iterations: self.feature_iterations.unwrap_or(if q { 5 } else { 10 }),
            feature_configs: self.feature_config.into_iter().collect(),
            out_dir: self.out_dir,
            ctr_timeout: Duration::from_secs(self.ctr_timeout),
            debug: self.debug,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(args: &[&str]) -> Result<Plan, String> {
        Args::try_parse_from(std::iter::once("rund-bench").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?
            .plan()
    }

    #[test]
    fn quick_defaults() {
        let p = plan(&["--quick"]).unwrap();
        assert_eq!(
            (p.iterations, p.concurrency.clone(), p.stop_samples),
            (10, vec![50], 1)
        );
        assert_eq!((p.rounds, p.study_rounds, p.pool_rounds), (1, 1, 1));
        let p = plan(&[]).unwrap();
        assert_eq!((p.iterations, p.concurrency), (30, vec![50, 200]));
        assert_eq!((p.rounds, p.study_rounds, p.pool_rounds), (3, 1, 2));
        let p = plan(&["--rounds", "2"]).unwrap();
        assert_eq!((p.rounds, p.study_rounds, p.pool_rounds), (2, 2, 2));
        assert!(plan(&["--rounds", "0"]).is_err());
    }

    #[test]
    fn flags_override() {
        let p = plan(&[
            "--quick",
            "--concurrency",
            "200,5,5",
            "--runtimes",
            "runc",
            "--iterations",
            "3",
        ])
        .unwrap();
        assert_eq!(p.concurrency, vec![5, 200]);
        assert_eq!(p.runtimes, vec![RuntimeKind::Runc]);
        assert_eq!(p.iterations, 3);
        assert!(!p.features, "features need rund");
        assert!(!p.pool, "the pool study needs rund");
        let p = plan(&["--quick", "--pool-cycles", "0"]).unwrap();
        assert_eq!((p.pool, p.pool_cycles), (true, 0));
        assert_eq!(plan(&[]).unwrap().pool_cycles, 1000);
        let p = plan(&["--quick", "--skip-floor", "--cri-pods", "0"]).unwrap();
        assert_eq!(
            (p.floor, p.cri, p.cri_pods, p.idle_pods),
            (false, true, 1, 3)
        );
        let p = plan(&["--feature-config", "userns-on=/x.toml"]).unwrap();
        assert_eq!(
            p.feature_configs.get("userns-on"),
            Some(&PathBuf::from("/x.toml"))
        );
    }

    #[test]
    fn kube_levels() {
        let p = plan(&["--quick"]).unwrap();
        assert_eq!(
            (p.kube, p.kube_pods.clone(), p.kube_samples),
            (true, vec![1, 50], 4)
        );
        let p = plan(&[]).unwrap();
        assert_eq!(p.kube_pods, vec![1, 50, 200]);
        assert_eq!(p.kube_settle, Duration::from_secs(10));
        let p = plan(&[
            "--kube-pods",
            "200,1,1",
            "--skip-kube",
            "--kube-settle",
            "0",
        ])
        .unwrap();
        assert_eq!(
            (p.kube, p.kube_pods, p.kube_settle),
            (false, vec![1, 200], Duration::ZERO)
        );
        assert!(plan(&["--kube-pods", "0,50"]).is_err());
    }

    #[test]
    fn node_levels() {
        assert_eq!(plan(&["--quick"]).unwrap().node_pods, vec![20]);
        let p = plan(&[]).unwrap();
        assert_eq!((p.node, p.node_pods), (true, vec![50, 200]));
        let p = plan(&["--skip-single", "--skip-concurrent"]).unwrap();
        assert!(!p.api, "nothing to time through the API");
        assert!(plan(&[]).unwrap().api);
        assert!(!plan(&["--skip-api"]).unwrap().api);
        let p = plan(&["--node-pods", "7,3,7", "--skip-node"]).unwrap();
        assert_eq!((p.node, p.node_pods), (false, vec![3, 7]));
        assert!(plan(&["--node-pods", "0"]).is_err());
        // It compares rund with runc-v2: one of them alone has nothing to compare.
        assert!(!plan(&["--runtimes", "rund"]).unwrap().node);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(plan(&["--concurrency", "0"]).is_err());
        assert!(plan(&["--runtimes", "crun"]).is_err());
        assert!(
            plan(&["--runtimes", "noop"]).is_err(),
            "the floor is no choice"
        );
        assert!(plan(&["--feature-config", "nokey"]).is_err());
    }
}
