//! The same comparison through rund-cgroup itself, pool on against off:
//! `Cgroups::create` (the pool's claim by rename, else mkdir in every
//! hierarchy) and `CgroupManager::destroy` (the pool's recycle: the
//! emptiness check, the reset of every limit, the renames and the pool's
//! counters; else rmdir), and of the recycle the part a Delete waits for
//! (`destroy_detached`: the emptiness check and the renames off the path).
//! Device rules and the default limits are applied as for a container
//! without resources. Each step is timed apart, the rest done untimed
//! around it, so the pool holds the same number of free slots at every
//! iteration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use rund_cgroup::fs::RealFs;
use rund_cgroup::{CgroupConfig, CgroupManager, Cgroups, Destroyed, Hierarchy, Switch};

/// Warmed before the pool-on runs: claims never find the pool empty.
const SLOTS: usize = 4;

fn config(pool: Switch, parent: &str, state: &std::path::Path) -> CgroupConfig {
    CgroupConfig {
        pool,
        pool_parents: vec![parent.to_string()],
        batch: SLOTS,
        low: 1,
        high: 1024,
        state_dir: state.to_path_buf(),
        ..CgroupConfig::default()
    }
}

/// The step of a cgroup's life that is timed.
#[derive(Clone, Copy)]
enum Step {
    Create,
    Destroy,
    /// Only what a Delete waits for; the recycle then finishes untimed.
    DestroyDetached,
}

fn fail(what: &str, path: &str, e: rund_cgroup::Error) -> ! {
    eprintln!("cgroup bench: {what} {path}: {e}");
    std::process::exit(1)
}

/// Times `step` of the cgroup at `path`, `iters` times.
fn timed(cg: &Cgroups, path: &str, iters: u64, step: Step) -> Duration {
    let create = || -> CgroupManager {
        cg.create(path, None)
            .unwrap_or_else(|e| fail("create", path, e))
    };
    let destroy = |m: CgroupManager| {
        if let Err(e) = m.destroy() {
            fail("destroy", path, e)
        }
    };
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        match step {
            Step::Create => {
                let t = Instant::now();
                let m = create();
                total += t.elapsed();
                destroy(m);
            }
            Step::Destroy => {
                let m = create();
                let t = Instant::now();
                destroy(m);
                total += t.elapsed();
            }
            Step::DestroyDetached => {
                let m = create();
                let t = Instant::now();
                let d = m
                    .destroy_detached()
                    .unwrap_or_else(|e| fail("destroy", path, e));
                total += t.elapsed();
                if let Destroyed::Recycling(p) = d {
                    if let Err(e) = p.finish() {
                        fail("finish the recycle of", path, e)
                    }
                }
            }
        }
    }
    total
}

pub fn bench(c: &mut Criterion) {
    let hier = match Hierarchy::detect() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cgroup bench: rund-cgroup figures skipped: {e}");
            return;
        }
    };
    let mounts: Vec<_> = match &hier {
        Hierarchy::V1 { hierarchies, .. } => hierarchies.iter().map(|v| v.mount.clone()).collect(),
        Hierarchy::V2 { .. } => {
            eprintln!("cgroup bench: rund-cgroup figures skipped: no pool on cgroup v2");
            return;
        }
    };
    // The pool's state files on a tmpfs, as /run is on a node (on this
    // machine's ext4 each counters update pays a flush on rename).
    let Ok(state) = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()) else {
        eprintln!("cgroup bench: rund-cgroup figures skipped: no temp dir");
        return;
    };
    let parent = format!("/rund-bench-lib-{}", std::process::id());
    let path = format!("{parent}/ctr");
    let on = Cgroups::with(
        hier.clone(),
        Arc::new(RealFs),
        config(Switch::On, &parent, state.path()),
    );
    let off = Cgroups::with(
        hier.clone(),
        Arc::new(RealFs),
        config(Switch::Off, &parent, state.path()),
    );
    if let Err(e) = on.pool_warm(&parent, SLOTS) {
        eprintln!("cgroup bench: rund-cgroup figures skipped: warming {parent}: {e}");
    } else {
        let n = mounts.len();
        let mut g = c.benchmark_group("cgroup-v1-rund-cgroup");
        for (name, cg, step) in [
            ("create, pool off (mkdir)", &off, Step::Create),
            ("destroy, pool off (rmdir)", &off, Step::Destroy),
            ("create, pool on (claim)", &on, Step::Create),
            ("destroy, pool on (recycle)", &on, Step::Destroy),
            (
                "destroy, pool on (Delete's wait: off its path)",
                &on,
                Step::DestroyDetached,
            ),
        ] {
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_custom(|it| timed(cg, &path, it, step))
            });
        }
        g.finish();
    }
    if let Err(e) = on.pool_gc(true) {
        eprintln!("cgroup bench: draining {parent}: {e}");
    }
    for m in &mounts {
        super::remove_parent(&m.join(parent.trim_start_matches('/')));
    }
}
