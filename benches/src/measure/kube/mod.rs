//! Kubernetes-shaped pods, next to the flat ctr study: one private CRI
//! containerd (the host's default line) serving runc-v2 and rund with the
//! cgroup pool on and off side by side. Each pod gets its own parent cgroup,
//! made by the bench as the kubelet's cgroupfs driver makes it, then one
//! busybox container. Per handler and N: start latency (RunPodSandbox to
//! StartContainer), the kernel's cgroup mkdir/rmdir/rename inside the pod
//! cgroups (tracepoints in a tracefs instance of the bench's own), dying
//! cgroups after the run and after a settle, and for rund the Create's
//! cgroup phase from each variant's phases file.

pub mod cgroups;
pub mod handlers;
pub mod model;
pub mod ops;
pub mod phases;
mod pods;
mod run;
pub mod trace;

use std::time::Duration;

pub use model::{KubeRun, KubeStudy};

/// The study's knobs.
pub struct Options<'a> {
    /// Pod counts N; 1 runs pods one after another, others all at once.
    pub pods: &'a [usize],
    /// N = 1: pods per handler (split over two rounds of opposite order).
    pub samples: usize,
    /// N > 1: bursts per handler.
    pub rounds: usize,
    /// Wait before the second dying count.
    pub settle: Duration,
    pub with_rund: bool,
    /// Where containerd's log is kept.
    pub out_dir: &'a std::path::Path,
}

impl Options<'_> {
    fn handlers(&self) -> usize {
        if self.with_rund {
            3
        } else {
            1
        }
    }

    /// (round, pods in it) for level `n`.
    fn rounds_of(&self, n: usize) -> Vec<usize> {
        if n == 1 {
            let a = self.samples.div_ceil(2);
            [a, self.samples - a]
                .into_iter()
                .filter(|&k| k > 0)
                .collect()
        } else {
            vec![n; self.rounds]
        }
    }
}

/// Pod starts, for the progress bar (warm-up pods included).
pub fn steps(o: &Options) -> u64 {
    let per: usize = o
        .pods
        .iter()
        .map(|&n| o.rounds_of(n).iter().sum::<usize>())
        .sum();
    ((per + 1) * o.handlers()) as u64
}

pub use run::run;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n1_splits_samples_over_two_rounds_and_bursts_repeat() {
        let o = Options {
            pods: &[1, 50],
            samples: 5,
            rounds: 2,
            settle: Duration::ZERO,
            with_rund: true,
            out_dir: std::path::Path::new("/nonexistent"),
        };
        assert_eq!(o.rounds_of(1), vec![3, 2]);
        assert_eq!(o.rounds_of(50), vec![50, 50]);
        assert_eq!(steps(&o), (5 + 100 + 1) * 3);
        let o = Options {
            samples: 1,
            with_rund: false,
            ..o
        };
        assert_eq!(o.rounds_of(1), vec![1]);
        assert_eq!(steps(&o), 1 + 1 + 100);
    }
}
