//! Feature switches of rund (the cgroup pool has its own study in
//! `pool/`), each measured on against off with the same
//! alternation. A switch is a rund config file sent as the runtime options'
//! `ConfigPath`. A switch is only measured when a probe shows the shim honours
//! it; otherwise it is skipped with a note, never reported as a figure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{concurrent, single, Driver};
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::{FeatureResult, SampleSet};
use crate::runtime::{Runtime, RuntimeKind};

/// One switch: two variants, each a config file.
pub struct Switch {
    pub feature: &'static str,
    pub variants: [&'static str; 2],
    /// Default file contents.
    pub defaults: [&'static str; 2],
    /// Also compare concurrent starts (the pool matters under concurrency).
    pub concurrent: bool,
}

pub const SWITCHES: &[Switch] = &[
    Switch {
        feature: "userns",
        variants: ["on", "off"],
        defaults: [
            "[userns]\nmode = \"always\"\n",
            "[userns]\nmode = \"requested\"\n",
        ],
        concurrent: false,
    },
    // `{state}` becomes a state dir of the variant's own, where the node's
    // log shows the probe that the mode is in force.
    Switch {
        feature: "shim",
        variants: ["per-node+warm", "per-pod"],
        defaults: [
            "state_dir = {state}\n[shim]\nmode = \"per-node\"\n[sandbox]\nwarm = 4\n",
            "state_dir = {state}\n[shim]\nmode = \"per-pod\"\n",
        ],
        concurrent: true,
    },
];

pub struct Options<'a> {
    pub iterations: usize,
    pub concurrency: &'a [usize],
    /// `<feature>-<variant>` -> config file given on the command line.
    pub overrides: &'a BTreeMap<String, PathBuf>,
}

/// Steps the progress bar gets per switch when it is measured.
pub fn steps(sw: &Switch, iterations: usize, concurrency: &[usize]) -> u64 {
    let c: usize = if sw.concurrent {
        concurrency.iter().map(|n| 2 * n).sum()
    } else {
        0
    };
    (2 * (iterations + c)) as u64
}

pub fn run(env: &BenchEnv, opts: &Options, progress: &Progress) -> Vec<FeatureResult> {
    let dir = env.containerd.dir.join("bench-configs");
    let _ = std::fs::create_dir_all(&dir);
    let mut out = Vec::new();
    for sw in SWITCHES {
        if interrupted() {
            break;
        }
        progress.phase(format!("rund {} probe", sw.feature));
        let paths = config_paths(sw, &dir, opts.overrides);
        let mut fr = FeatureResult {
            feature: sw.feature.into(),
            variants: sw.variants.map(String::from),
            config_paths: [0, 1].map(|i| {
                paths
                    .as_ref()
                    .map(|p| p[i].display().to_string())
                    .unwrap_or_default()
            }),
            supported: false,
            note: String::new(),
            single_start: Default::default(),
            concurrent: Default::default(),
        };
        let paths = match paths {
            Ok(p) => p,
            Err(e) => {
                fr.note = format!("skipped: cannot write config files: {e}");
                out.push(fr);
                continue;
            }
        };
        let rts = paths.clone().map(|p| Runtime {
            kind: RuntimeKind::Rund,
            config_path: Some(p),
        });
        match probe(sw, env, &rts) {
            Ok(note) => {
                fr.supported = true;
                fr.note = note;
            }
            Err(why) => {
                fr.note = format!("skipped: {why}");
                progress.inc(steps(sw, opts.iterations, opts.concurrency));
                out.push(fr);
                continue;
            }
        }
        progress.phase(format!("rund {} on/off single start", sw.feature));
        let variant_of = |rt: &Runtime| {
            if rt.config_path == rts[0].config_path {
                sw.variants[0]
            } else {
                sw.variants[1]
            }
            .to_string()
        };
        let mut sets = single::run(
            env,
            Driver::Ctr,
            &rts,
            opts.iterations,
            &format!("f{}", sw.feature),
            variant_of,
            progress,
        )
        .0;
        fr.single_start = sw
            .variants
            .map(|v| sets.remove(v).unwrap_or_else(SampleSet::default));
        if sw.concurrent {
            for &n in opts.concurrency {
                for (i, rt) in rts.iter().enumerate() {
                    if interrupted() {
                        break;
                    }
                    let mut r = concurrent::run(
                        env,
                        Driver::Ctr,
                        rt,
                        n,
                        100 + i,
                        &concurrent::Options { density: false },
                        progress,
                    );
                    r.variant = Some(sw.variants[i].to_string());
                    fr.concurrent[i].push(r);
                }
            }
        }
        out.push(fr);
    }
    out
}

fn config_paths(
    sw: &Switch,
    dir: &Path,
    overrides: &BTreeMap<String, PathBuf>,
) -> std::io::Result<[PathBuf; 2]> {
    let mut out: [PathBuf; 2] = Default::default();
    for (i, slot) in out.iter_mut().enumerate() {
        let key = format!("{}-{}", sw.feature, sw.variants[i]);
        *slot = match overrides.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = dir.join(format!("{key}.toml"));
                let state = dir.join(format!("state-{key}")).display().to_string();
                std::fs::write(&p, sw.defaults[i].replace("{state}", &format!("{state:?}")))?;
                p
            }
        };
    }
    Ok(out)
}

/// Evidence that the shim honours the switch, or why not.
fn probe(sw: &Switch, env: &BenchEnv, rts: &[Runtime; 2]) -> Result<String, String> {
    match sw.feature {
        "userns" => {
            let map = |rt: &Runtime, i: usize| {
                env.ctr
                    .run_rm(
                        rt,
                        &env.rootfs,
                        &format!("rund-probe-userns-{i}"),
                        &["/bin/cat", "/proc/self/uid_map"],
                    )
                    .map(|(out, _)| out.split_whitespace().collect::<Vec<_>>().join(" "))
                    .map_err(|e| {
                        let _ = env.ctr.remove_everything(&format!("rund-probe-userns-{i}"));
                        crate::ctr::short_error(&e, "rund-probe-userns")
                    })
            };
            let on = map(&rts[0], 0).map_err(|e| format!("probe with userns on failed: {e}"))?;
            let off = map(&rts[1], 1).map_err(|e| format!("probe with userns off failed: {e}"))?;
            let identity = "0 0 4294967295";
            if on == identity || on == off {
                return Err(format!(
                    "the shim ignores the userns switch (uid_map on: {on:?}, off: {off:?})"
                ));
            }
            Ok(format!("uid_map on: {on:?}, off: {off:?}"))
        }
        "shim" => {
            for (i, rt) in rts.iter().enumerate() {
                let id = format!("rund-probe-shim-{i}");
                env.ctr
                    .run_rm(rt, &env.rootfs, &id, &["/bin/true"])
                    .map_err(|e| {
                        let _ = env.ctr.remove_everything(&id);
                        format!(
                            "probe with {} failed: {}",
                            sw.variants[i],
                            crate::ctr::short_error(&e, &id)
                        )
                    })?;
            }
            let admitted = |i: usize| node_admitted(rts[i].config_path.as_deref());
            match (admitted(0), admitted(1)) {
                (true, false) => Ok("a node's shim admitted the per-node probe".into()),
                (a, b) => Err(format!(
                    "the shim ignores the mode (a node admitted per-node: {a}, per-pod: {b})"
                )),
            }
        }
        other => Err(format!("no probe for {other}")),
    }
}

/// Whether a node's shim admitted a pod under the config at `config`: its
/// log (`<state_dir>/node-*.log`) says so.
fn node_admitted(config: Option<&Path>) -> bool {
    // The top-level `state_dir = "..."` line (a TOML basic string is JSON's).
    let state = config
        .and_then(|c| std::fs::read_to_string(c).ok())
        .and_then(|t| {
            t.lines()
                .take_while(|l| !l.trim_start().starts_with('['))
                .find_map(|l| {
                    l.trim()
                        .strip_prefix("state_dir")?
                        .trim()
                        .strip_prefix('=')
                        .map(str::trim)
                        .map(String::from)
                })
        })
        .and_then(|v| serde_json::from_str::<String>(&v).ok())
        .map(PathBuf::from);
    state.is_some_and(|s| rund_tests::pernode::node_logs_in(&s).contains("pod admitted"))
}
