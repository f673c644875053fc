//! RunPodSandbox through CRI on containerd 2.1 (from the test cache), pods
//! on a CNI network: rund as its own sandboxer (`sandboxer = "shim"`, no
//! pause container) per pod, per node, and per node with warm sandboxes;
//! rund under containerd's podsandbox (a pause container run by rund); and
//! runc. One containerd serves every handler; the handlers alternate per
//! sample. Stop and removal are not timed. rund's own time is the shim's
//! Create of the pod's sandbox, from its `[trace] phases_file`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rund_tests::containerd::line::{cached_dir, ContainerdBins};
use rund_tests::{Containerd, ContainerdOpts, CriClient, PodSpec};

use super::ms;
use crate::progress::{interrupted, Progress};
use crate::results::CriStudy;

/// (handler, what it is). `rund` is the harness's rund runtime.
pub const HANDLERS: [(&str, &str); 5] = [
    ("rund", "rund, sandboxer = \"shim\" (no pause container)"),
    (
        "rund-podsandbox",
        "rund, sandboxer = \"podsandbox\" (pause container)",
    ),
    (
        "rund-node",
        "rund per-node shim, sandboxer = \"shim\", warm = 0",
    ),
    (
        "rund-warm",
        "rund per-node shim, sandboxer = \"shim\", warm = 4",
    ),
    ("runc", "runc-v2, sandboxer = \"podsandbox\""),
];

/// The per-node handlers: (name, warm sandboxes).
const NODE_HANDLERS: [(&str, usize); 2] = [("rund-node", 0), ("rund-warm", 4)];

/// Where a rund handler keeps its state and phase records.
struct RundFiles {
    state: PathBuf,
    phases: PathBuf,
}

fn files(dir: &Path, handler: &str) -> RundFiles {
    RundFiles {
        state: dir.join(format!("state-{handler}")),
        phases: dir.join(format!("phases-{handler}.jsonl")),
    }
}

/// A per-node rund config with `warm` sandboxes, its own state dir and
/// phase records.
fn node_config(f: &RundFiles, warm: usize) -> String {
    format!(
        "state_dir = {:?}\n[shim]\nmode = \"per-node\"\n[sandbox]\nwarm = {warm}\n[trace]\nphases_file = {:?}\n",
        f.state.display().to_string(),
        f.phases.display().to_string()
    )
}

/// A rund runtime table for the shim sandboxer whose options name `config`.
fn node_runtime(name: &str, config: &Path) -> String {
    let t = format!("plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.{name}");
    format!(
        "\n[{t}]\n  runtime_type = \"io.containerd.rund.v2\"\n  sandboxer = \"shim\"\n  \
         pod_annotations = [\"*\", \"*/*\"]\n\n[{t}.options]\n  ConfigPath = {:?}\n",
        config.display().to_string()
    )
}

/// A second rund handler under containerd's own pod sandboxer. Its shim
/// reads rund's config from RUND_CONFIG, as the shim sandboxer's does.
fn podsandbox_runtime() -> String {
    "\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.rund-podsandbox]\n  \
     runtime_type = \"io.containerd.rund.v2\"\n  sandboxer = \"podsandbox\"\n  \
     pod_annotations = [\"*\", \"*/*\"]\n"
        .to_string()
}

pub fn run(pods: usize, with_rund: bool, out_dir: &Path, progress: &Progress) -> CriStudy {
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
    let scratch = match tempfile::Builder::new().prefix("rund-bench-cri").tempdir() {
        Ok(d) => d,
        Err(e) => {
            skipped(&mut study, format!("scratch dir: {e}"));
            return study;
        }
    };
    let mut phases = Vec::new();
    if with_rund {
        opts.rund_sandboxer = Some("shim".into());
        // Written into the instance dir (private state_dir), passed as RUND_CONFIG.
        let own = files(scratch.path(), "rund");
        opts.rund_config = Some(format!(
            "[trace]\nphases_file = {:?}\n",
            own.phases.display().to_string()
        ));
        phases.push(("rund", own));
        opts.extra_config = podsandbox_runtime();
        for (name, warm) in NODE_HANDLERS {
            let f = files(scratch.path(), name);
            let cfg = scratch.path().join(format!("{name}.toml"));
            if let Err(e) = std::fs::write(&cfg, node_config(&f, warm)) {
                skipped(&mut study, format!("{}: {e}", cfg.display()));
                return study;
            }
            opts.extra_config.push_str(&node_runtime(name, &cfg));
            phases.push((name, f));
        }
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
            let files = phases.iter().find(|(n, _)| *n == h).map(|(_, f)| f);
            sample(&cri, &ctd, h, i, files, &mut study);
            progress.inc(1);
        }
    }
    progress.inc(((HANDLERS.len() - handlers.len()) * (pods + 1)) as u64);
    study.log = crate::env::keep_log(&ctd.log, out_dir, "containerd-cri.log");
    study
    // `ctd` drops here: containerd stops and its pod network goes.
}

fn sample(
    cri: &CriClient,
    ctd: &Containerd,
    handler: &str,
    i: usize,
    files: Option<&RundFiles>,
    study: &mut CriStudy,
) {
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
            if let (Some(f), true) = (files, i > 0) {
                own_time(f, &id, handler, study);
            }
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

/// The shim's Create of sandbox `id` (its phase record), and whether it
/// claimed a warm agent (its record times a `warm_claim`).
fn own_time(f: &RundFiles, id: &str, handler: &str, study: &mut CriStudy) {
    let text = std::fs::read_to_string(&f.phases).unwrap_or_default();
    let record = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["id"].as_str() == Some(id));
    let own = study.own.entry(handler.into()).or_default();
    let Some(v) = record else {
        own.missing += 1;
        return;
    };
    if let Some(t) = v["total"].as_f64() {
        own.create.ok(t);
    }
    if let Some(p) = v["phases"].as_object() {
        for (k, ms) in p {
            if let Some(ms) = ms.as_f64() {
                own.phases.entry(k.clone()).or_default().push(ms);
            }
        }
    }
    if v["extra"]["warm_claim"].is_number() {
        own.warm_claims += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_handlers_are_valid_toml_with_their_config() {
        let f = files(Path::new("/b"), "rund-warm");
        let v: toml::Value = toml::from_str(&node_config(&f, 4)).unwrap();
        assert_eq!(v["shim"]["mode"].as_str(), Some("per-node"));
        assert_eq!(v["sandbox"]["warm"].as_integer(), Some(4));
        assert_eq!(
            v["trace"]["phases_file"].as_str(),
            Some("/b/phases-rund-warm.jsonl")
        );
        let v: toml::Value =
            toml::from_str(&node_runtime("rund-warm", Path::new("/c.toml"))).unwrap();
        let rt =
            &v["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["rund-warm"];
        assert_eq!(rt["sandboxer"].as_str(), Some("shim"));
        assert_eq!(rt["options"]["ConfigPath"].as_str(), Some("/c.toml"));
    }

    #[test]
    fn the_podsandbox_handler_is_valid_toml() {
        let v: toml::Value = toml::from_str(&podsandbox_runtime()).unwrap();
        let rt = &v["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
            ["rund-podsandbox"];
        assert_eq!(rt["sandboxer"].as_str(), Some("podsandbox"));
        assert_eq!(rt["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
    }
}
