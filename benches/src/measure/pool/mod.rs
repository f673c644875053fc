//! The cgroup pool, on against off. For N = 1 (sequential
//! `run --rm`) and each concurrency level, both the start time seen by ctr
//! and the Create's cgroup phase as the shim records it (`[trace]
//! phases_file`); then the dying memcgs left by create/delete cycles.
//!
//! The "on" variant is a node whose pool is sized for its burst: before each
//! run, untimed, `rund pool warm` fills the pool to N + low slots. Without
//! that, a burst larger than the pool falls back to mkdir for the rest.

pub(crate) mod dying;
mod phases;

use std::path::{Path, PathBuf};

use super::{concurrent, ms, Driver};
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::{note_error, PoolLevel, PoolStudy};
use crate::runtime::{Runtime, RuntimeKind};
use crate::stats::Summary;

/// Free slots kept below high water (also the refill trigger).
const LOW: usize = 16;

pub struct Options<'a> {
    /// Sequential `run --rm` samples per variant at N = 1.
    pub iterations: usize,
    pub concurrency: &'a [usize],
    /// Runs per variant at each concurrency level, pooled in the report.
    pub rounds: usize,
    /// Create/delete cycles per variant for the dying-memcg count (0: skip).
    pub cycles: usize,
    pub rund_bin_dir: Option<&'a Path>,
}

pub fn steps(o: &Options) -> u64 {
    let c: usize = o.concurrency.iter().map(|n| 2 * n * o.rounds).sum();
    (2 * (o.iterations + c + o.cycles)) as u64
}

/// One side of the comparison: a config file and its phase records.
struct Variant {
    name: &'static str,
    rt: Runtime,
    phases: PathBuf,
}

fn write_configs(dir: &Path, high: usize) -> std::io::Result<[Variant; 2]> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for name in ["on", "off"] {
        let phases = dir.join(format!("phases-{name}.jsonl"));
        let text = format!(
            "[cgroup]\npool = {name:?}\nlow = {LOW}\nhigh = {high}\nbatch = 32\n\
             state_dir = {:?}\n[trace]\nphases_file = {:?}\n",
            dir.join("cgroup-pool"),
            phases,
        );
        let path = dir.join(format!("cgroup-pool-{name}.toml"));
        std::fs::write(&path, text)?;
        out.push(Variant {
            name,
            rt: Runtime {
                kind: RuntimeKind::Rund,
                config_path: Some(path),
            },
            phases,
        });
    }
    let [on, off]: [Variant; 2] = out.try_into().map_err(|_| std::io::Error::other("two"))?;
    Ok([on, off])
}

/// `rund pool <args…>` with the variant's config.
fn rund_pool(cli: &Path, v: &Variant, args: &[&str]) -> Result<String, String> {
    let cfg = v.rt.config_path.as_deref().unwrap_or(Path::new(""));
    let out = std::process::Command::new(cli)
        .arg("--config")
        .arg(cfg)
        .arg("pool")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`rund pool {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn run(env: &BenchEnv, o: &Options, progress: &Progress) -> PoolStudy {
    let parent = format!("/{}", env.containerd.namespace);
    let mut study = PoolStudy {
        parent: parent.clone(),
        ..Default::default()
    };
    let high = o.concurrency.iter().copied().max().unwrap_or(1) + 2 * LOW;
    let dir = env.containerd.dir.join("bench-pool");
    let variants = match write_configs(&dir, high) {
        Ok(v) => v,
        Err(e) => {
            study.note = format!("skipped: cannot write config files: {e}");
            progress.inc(steps(o));
            return study;
        }
    };
    study.config_paths = [0, 1].map(|i| {
        variants[i]
            .rt
            .config_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    });
    let Some(cli) = o
        .rund_bin_dir
        .map(|d| d.join("rund"))
        .filter(|p| p.is_file())
    else {
        study.note = "skipped: no `rund` CLI next to the shim".into();
        progress.inc(steps(o));
        return study;
    };
    let warm = |v: &Variant, n: usize| -> Result<(), String> {
        if v.name == "on" {
            rund_pool(
                &cli,
                v,
                &["warm", &parent, "--slots", &(n + LOW).to_string()],
            )?;
        }
        Ok(())
    };

    progress.phase("rund cgroup pool on/off N=1");
    for v in &variants {
        if let Err(e) = warm(v, 1) {
            study.note = format!("skipped: {e}");
            progress.inc(steps(o));
            return study;
        }
    }
    study
        .levels
        .extend(sequential(env, &variants, o.iterations, progress));
    // Evidence the shim honours the configs: each variant left phase records.
    let missing: Vec<&str> = study
        .levels
        .iter()
        .filter(|l| l.cgroup_ms.is_empty())
        .map(|l| l.variant.as_str())
        .collect();
    if !missing.is_empty() {
        let errors: Vec<&str> = study
            .levels
            .iter()
            .flat_map(|l| l.errors.iter().map(String::as_str))
            .collect();
        study.note = format!(
            "skipped: no phase records with the pool {} (does the shim read [trace] \
             phases_file?); errors: {}",
            missing.join(", "),
            if errors.is_empty() {
                "none".into()
            } else {
                errors.join("; ")
            }
        );
        progress.inc(steps(o) - 2 * o.iterations as u64);
        return study;
    }
    study.supported = true;

    for &n in o.concurrency {
        let mut levels = variants.each_ref().map(|v| PoolLevel {
            variant: v.name.into(),
            n,
            ..Default::default()
        });
        for round in 0..o.rounds {
            // on, off, then off, on: neither always goes first.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                let (v, level) = (&variants[k], &mut levels[k]);
                if interrupted() {
                    break;
                }
                progress.phase(format!("rund cgroup pool {} N={n} round {round}", v.name));
                if let Err(e) = warm(v, n) {
                    note_error(&mut level.errors, e);
                }
                phases::reset(&v.phases);
                let r = concurrent::run(
                    env,
                    Driver::Ctr,
                    &v.rt,
                    n,
                    300 + round,
                    &concurrent::Options { density: false },
                    progress,
                );
                level.runs += 1;
                level.start_ms.extend(&r.latencies_ms);
                level.start = Summary::of(&level.start_ms);
                if r.failures == 0 {
                    level.walls_ms.push(r.wall_ms);
                }
                level.failures += r.failures;
                for e in r.errors {
                    note_error(&mut level.errors, e);
                }
                phases::append(level, &v.phases);
            }
        }
        study.levels.extend(levels);
    }

    if o.cycles > 0 && !interrupted() {
        study.dying = dying::run(env, &variants, o.cycles, progress);
    } else {
        progress.inc(2 * o.cycles as u64);
    }
    // Leave no slots behind under the bench's namespace.
    if let Err(e) = rund_pool(&cli, &variants[0], &["gc", "--drain"]) {
        study.note = format!("draining the pool after the bench: {e}");
    }
    study
}

/// N = 1: `iterations` sequential `run --rm /bin/true` per variant, A B A B.
fn sequential(
    env: &BenchEnv,
    variants: &[Variant; 2],
    iterations: usize,
    progress: &Progress,
) -> Vec<PoolLevel> {
    let mut levels: Vec<PoolLevel> = variants
        .iter()
        .map(|v| {
            phases::reset(&v.phases);
            PoolLevel {
                variant: v.name.into(),
                n: 1,
                ..Default::default()
            }
        })
        .collect();
    for i in 0..iterations {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            if interrupted() {
                break;
            }
            let v = &variants[k];
            let id = format!("rund-pool{}-{i}", v.name);
            match env.ctr.run_rm(&v.rt, &env.rootfs, &id, &["/bin/true"]) {
                Ok((_, d)) => levels[k].start_ms.push(ms(d)),
                Err(e) => {
                    levels[k].failures += 1;
                    note_error(&mut levels[k].errors, short_error(&e, &id));
                    let _ = env.ctr.remove_everything(&id);
                }
            }
            progress.inc(1);
        }
    }
    for (level, v) in levels.iter_mut().zip(variants) {
        level.runs = 1;
        level.start = Summary::of(&level.start_ms);
        phases::append(level, &v.phases);
    }
    levels
}
