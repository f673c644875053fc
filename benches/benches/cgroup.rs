//! cgroup v1: creating a container's cgroups with mkdir (what runc and rund
//! without the pool do) against claiming pre-made slots by rename (rund's
//! pool), across every v1 hierarchy of this machine. Written against
//! cgroupfs directly, so it measures the kernel cost the pool avoids whatever
//! state rund-cgroup is in.
//!
//! Runs as root on a host with v1 hierarchies; otherwise prints why and
//! measures nothing. Everything lives under a unique parent
//! (`rund-bench-cg-<pid>`) in each hierarchy and is removed at the end, also
//! when an operation fails (the bench profile aborts on panic, so failures
//! clean up and exit instead of panicking).
//!
//! `library` measures the same through rund-cgroup itself (`Cgroups::create`
//! and `CgroupManager::destroy`, pool on against off): what the pool's
//! claim and recycle add on top of the renames measured here.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

#[path = "cgroup/library.rs"]
mod library;

/// Mount points of the v1 hierarchies (all of them: runc creates the
/// container's cgroup in each, name=systemd included).
fn v1_hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup").then(|| PathBuf::from(f[1]))
        })
        .collect()
}

fn v2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
    })
}

/// Every parent created, for clean-up on a failed operation.
static CREATED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The unique parent in every hierarchy; removed (children first) on drop.
struct Parents {
    dirs: Vec<PathBuf>,
}

fn remove_parent(d: &PathBuf) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    if let Err(e) = std::fs::remove_dir(d) {
        if e.kind() != ErrorKind::NotFound {
            eprintln!("cgroup bench: could not remove {}: {e}", d.display());
        }
    }
}

/// A cgroup operation failed: remove what we made and stop.
fn fail(what: &str, d: &std::path::Path, e: std::io::Error) -> ! {
    eprintln!("cgroup bench: {what} {} failed: {e}", d.display());
    for p in CREATED.lock().map(|v| v.clone()).unwrap_or_default() {
        remove_parent(&p);
    }
    std::process::exit(1);
}

impl Parents {
    fn create(roots: &[PathBuf]) -> std::io::Result<Parents> {
        let name = format!("rund-bench-cg-{}", std::process::id());
        let mut p = Parents { dirs: Vec::new() };
        for r in roots {
            let d = r.join(&name);
            std::fs::create_dir(&d)?;
            if let Ok(mut v) = CREATED.lock() {
                v.push(d.clone());
            }
            p.dirs.push(d);
        }
        Ok(p)
    }

    fn join(&self, child: &str) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join(child)).collect()
    }
}

impl Drop for Parents {
    fn drop(&mut self) {
        for d in &self.dirs {
            remove_parent(d);
        }
        if let Ok(mut v) = CREATED.lock() {
            v.retain(|d| !self.dirs.contains(d));
        }
    }
}

fn mkdir_all(dirs: &[PathBuf]) {
    for d in dirs {
        if let Err(e) = std::fs::create_dir(d) {
            fail("mkdir", d, e);
        }
    }
}

fn rmdir_all(dirs: &[PathBuf]) {
    for d in dirs {
        if let Err(e) = std::fs::remove_dir(d) {
            fail("rmdir", d, e);
        }
    }
}

fn rename_all(from: &[PathBuf], to: &[PathBuf]) {
    for (a, b) in from.iter().zip(to) {
        if let Err(e) = std::fs::rename(a, b) {
            fail("rename", a, e);
        }
    }
}

/// Times only `timed`; `before`/`after` keep every iteration's state equal.
fn timed_iters(
    iters: u64,
    mut before: impl FnMut(),
    mut timed: impl FnMut(),
    mut after: impl FnMut(),
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        before();
        let t = Instant::now();
        timed();
        total += t.elapsed();
        after();
    }
    total
}

fn bench_set(c: &mut Criterion, group: &str, roots: &[PathBuf]) {
    let parents = match Parents::create(roots) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cgroup bench {group}: skipped, cannot create a parent cgroup: {e}");
            return;
        }
    };
    let ctr = parents.join("ctr");
    let slot = parents.join("slot");
    let n = roots.len();
    let mut g = c.benchmark_group(group);
    g.bench_function(BenchmarkId::new("mkdir", n), |b| {
        b.iter_custom(|it| timed_iters(it, || {}, || mkdir_all(&ctr), || rmdir_all(&ctr)))
    });
    g.bench_function(BenchmarkId::new("rmdir", n), |b| {
        b.iter_custom(|it| timed_iters(it, || mkdir_all(&ctr), || rmdir_all(&ctr), || {}))
    });
    g.bench_function(BenchmarkId::new("mkdir+rmdir (no pool)", n), |b| {
        b.iter_custom(|it| {
            timed_iters(
                it,
                || {},
                || {
                    mkdir_all(&ctr);
                    rmdir_all(&ctr);
                },
                || {},
            )
        })
    });
    // The pool's fast path: the slot exists already (made off the start path).
    g.bench_function(BenchmarkId::new("claim by rename", n), |b| {
        mkdir_all(&slot);
        b.iter_custom(|it| {
            timed_iters(
                it,
                || {},
                || rename_all(&slot, &ctr),
                || rename_all(&ctr, &slot),
            )
        });
        rmdir_all(&slot);
    });
    g.bench_function(BenchmarkId::new("claim+recycle by rename (pool)", n), |b| {
        mkdir_all(&slot);
        b.iter_custom(|it| {
            timed_iters(
                it,
                || {},
                || {
                    rename_all(&slot, &ctr);
                    rename_all(&ctr, &slot);
                },
                || {},
            )
        });
        rmdir_all(&slot);
    });
    g.finish();
}

fn main() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("cgroup bench: skipped, needs root to create cgroups");
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let v1 = v1_hierarchies();
    if v1.is_empty() {
        eprintln!("cgroup bench: no cgroup v1 hierarchy mounted; v1 figures skipped");
    } else {
        eprintln!("cgroup bench: v1 hierarchies: {v1:?}");
        bench_set(&mut c, "cgroup-v1-all-hierarchies", &v1);
        if let Some(mem) = v1.iter().find(|p| p.ends_with("memory")) {
            bench_set(&mut c, "cgroup-v1-memory-only", std::slice::from_ref(mem));
        }
        library::bench(&mut c);
    }
    // v2 refuses rename (the pool keeps slot names there): mkdir/rmdir only.
    if let Some(root) = v2_root() {
        match Parents::create(std::slice::from_ref(&root)) {
            Ok(p) => {
                let ctr = p.join("ctr");
                let mut g = c.benchmark_group("cgroup-v2");
                g.bench_function("mkdir", |b| {
                    b.iter_custom(|it| {
                        timed_iters(it, || {}, || mkdir_all(&ctr), || rmdir_all(&ctr))
                    })
                });
                g.bench_function("rmdir", |b| {
                    b.iter_custom(|it| {
                        timed_iters(it, || mkdir_all(&ctr), || rmdir_all(&ctr), || {})
                    })
                });
                g.finish();
            }
            Err(e) => eprintln!("cgroup bench: v2 skipped at {}: {e}", root.display()),
        }
    }
    c.final_summary();
}
