//! RunPodSandbox through CRI on containerd 2.1 (from the test cache), pods
//! on a CNI network: rund as its own sandboxer (`sandboxer = "shim"`, no
//! pause container), rund under containerd's podsandbox (a pause container
//! run by rund), and runc. One containerd serves all three handlers; the
//! handlers alternate per sample. Stop and removal are not timed.

use std::time::Instant;

use rund_tests::containerd::line::{cached_dir, ContainerdBins};
use rund_tests::{Containerd, ContainerdOpts, CriClient, PodSpec};

use super::ms;
use crate::progress::{interrupted, Progress};
use crate::results::CriStudy;

/// (handler, what it is). `rund` is the harness's rund runtime.
pub const HANDLERS: [(&str, &str); 3] = [
    ("rund", "rund, sandboxer = \"shim\" (no pause container)"),
    (
        "rund-podsandbox",
        "rund, sandboxer = \"podsandbox\" (pause container)",
    ),
    ("runc", "runc-v2, sandboxer = \"podsandbox\""),
];

/// A second rund handler under containerd's own pod sandboxer. Its shim
/// reads rund's config from RUND_CONFIG, as the shim sandboxer's does.
fn podsandbox_runtime() -> String {
    "\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.rund-podsandbox]\n  \
     runtime_type = \"io.containerd.rund.v2\"\n  sandboxer = \"podsandbox\"\n  \
     pod_annotations = [\"*\", \"*/*\"]\n"
        .to_string()
}

pub fn run(pods: usize, with_rund: bool, progress: &Progress) -> CriStudy {
    let mut study = CriStudy::default();
    let handlers: Vec<(&str, &str)> = HANDLERS
        .iter()
        .copied()
        .filter(|(h, _)| with_rund || *h == "runc")
        .collect();
    let skipped = |study: &mut CriStudy, why: String| {
        study.note = format!("skipped: {why}");
        progress.inc(((pods + 1) * HANDLERS.len()) as u64);
    };
    progress.phase("CRI: containerd 2.1");
    let bins = match ContainerdBins::probe(&cached_dir("2.1")) {
        Ok(b) => b,
        Err(e) => {
            skipped(
                &mut study,
                format!("containerd 2.1 is not in the cache ({e}); run `make containerd-2.1`"),
            );
            return study;
        }
    };
    study.containerd = bins.version.clone();
    let mut opts = ContainerdOpts::new().with_runc().pod_network();
    opts.containerd = Some(bins);
    opts.debug = false;
    opts.with_rund = with_rund;
    if with_rund {
        opts.rund_sandboxer = Some("shim".into());
        // Written into the instance dir (private state_dir), passed as RUND_CONFIG.
        opts.rund_config = Some(String::new());
        opts.extra_config = podsandbox_runtime();
    }
    let ctd = match Containerd::start(opts) {
        Ok(c) => c,
        Err(e) => {
            skipped(&mut study, format!("starting containerd 2.1: {e}"));
            return study;
        }
    };
    let cri = match ctd.cri_client() {
        Ok(c) => c,
        Err(e) => {
            skipped(&mut study, format!("CRI client: {e}"));
            return study;
        }
    };
    study.supported = true;
    for (h, what) in &handlers {
        study.handlers.insert(h.to_string(), what.to_string());
    }
    // Sample 0 of each handler is a warm-up (first pod on the network, first
    // shim of a kind), kept apart from the figures.
    for i in 0..=pods {
        // Rotate the order so no handler always goes first.
        for k in 0..handlers.len() {
            let (h, _) = handlers[(i + k) % handlers.len()];
            if interrupted() {
                break;
            }
            progress.phase(format!("CRI RunPodSandbox {h}"));
            sample(&cri, &ctd, h, i, &mut study);
            progress.inc(1);
        }
    }
    progress.inc(((HANDLERS.len() - handlers.len()) * (pods + 1)) as u64);
    study
    // `ctd` drops here: containerd stops and its pod network goes.
}

fn sample(cri: &CriClient, ctd: &Containerd, handler: &str, i: usize, study: &mut CriStudy) {
    let mut pod = PodSpec::new(&format!("b-{handler}-{i}"), &ctd.cgroup_parent);
    pod.host_network = false;
    let sets = if i == 0 {
        &mut study.warmup
    } else {
        &mut study.run_pod_sandbox
    };
    let set = sets.entry(handler.into()).or_default();
    let t0 = Instant::now();
    match cri.run_pod_sandbox(&pod, handler) {
        Ok(id) => {
            set.ok(ms(t0.elapsed()));
            if cri.stop_pod_sandbox(&id).is_err() || cri.remove_pod_sandbox(&id).is_err() {
                study.teardown_failures += 1;
            }
        }
        Err(e) => {
            set.fail(e.to_string());
            // A failed RunPodSandbox may leave a NOTREADY sandbox behind.
            if let Ok(all) = cri.list_pod_sandboxes() {
                for p in all {
                    if p.metadata.as_ref().is_some_and(|m| m.name == pod.name) {
                        let _ = cri.stop_pod_sandbox(&p.id);
                        let _ = cri.remove_pod_sandbox(&p.id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_podsandbox_handler_is_valid_toml() {
        let v: toml::Value = toml::from_str(&podsandbox_runtime()).unwrap();
        let rt = &v["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
            ["rund-podsandbox"];
        assert_eq!(rt["sandboxer"].as_str(), Some("podsandbox"));
        assert_eq!(rt["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    }
}
