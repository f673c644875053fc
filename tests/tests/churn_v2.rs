//! Pod churn on pure cgroup v2, where Kubernetes shows dying cgroups, and single-start medians
//! rund vs runc-v2. Both are ignored (long): `make churn-v2` runs them in the VM.
//!
//! Churn: for runc and for rund with `[cgroup] reclaim_on_remove` on and off, each on a
//! private CRI containerd, N kubelet-shaped pods one after another (each its own pod cgroup
//! under a `kubepods/besteffort` the test makes as the kubelet's cgroupfs driver does). The
//! container reads a file from the image and writes 4 MiB into its rootfs, then exits; the pod
//! is stopped and removed and its cgroup rmdir'd. `nr_dying_descendants` of the top is read
//! right after and 30 s later. `RUND_CHURN_PODS` (default 200) sets N; `RUND_CHURN_STARTS`
//! (default 10) the starts per runtime.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rund_tests::cri::api::ContainerState;
use rund_tests::cri::{CriFixture, Handler};
use rund_tests::faults::soak::median;
use rund_tests::fsview::make_cgroup_like_the_kubelet;
use rund_tests::{
    ContainerSpec, Containerd, ContainerdOpts, PodSpec, BUSYBOX_IMAGE, RUNC_RUNTIME, RUND_RUNTIME,
};

const ROOT: &str = "/sys/fs/cgroup";
static KEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn dump(dir: &Path, what: &str) {
    for f in ["memory.stat", "io.stat", "cgroup.stat", "memory.current"] {
        let t = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let t: Vec<&str> = t.lines().filter(|l| {
            let k = l.split(' ').next().unwrap_or("");
            f != "memory.stat" || (["anon","file","kernel","kernel_stack","pagetables","percpu","sock","vmalloc","shmem","file_mapped","file_dirty","file_writeback","slab","pgmajfault","inactive_file","active_file","unevictable","swapcached"].contains(&k))
        }).collect();
        eprintln!("{what} {f}: {}", t.join(" | "));
    }
}
/// How long after the churn the dying count is read again.
const LATER: Duration = Duration::from_secs(30);
/// Under TCG a container takes seconds; only a hung one trips this.
const EXIT_WAIT: Duration = Duration::from_secs(300);
const WORKLOAD: &str =
    "cat /bin/busybox > /dev/null && dd if=/dev/zero of=/f bs=1M count=4 2>/dev/null";

/// The container's script for `RUND_CHURN_WORKLOAD` (`none`: no container at all).
fn workload() -> Option<String> {
    let w = std::env::var("RUND_CHURN_WORKLOAD").unwrap_or_else(|_| "write".into());
    match w.as_str() {
        "none" => None,
        "true" => Some("true".into()),
        "read" => Some("cat /bin/busybox > /dev/null".into()),
        "write" => Some(WORKLOAD.into()),
        "sync" => Some(format!("{WORKLOAD} && sync")),
        "fsync" => Some("cat /bin/busybox > /dev/null && dd if=/dev/zero of=/f bs=1M count=4 conv=fsync 2>/dev/null".into()),
        other => panic!("RUND_CHURN_WORKLOAD: unknown {other}"),
    }
}

fn pure_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists() && !Path::new(ROOT).join("memory").is_dir()
}

fn env_size(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One `key value` line of a flat-keyed cgroup file.
fn keyed(dir: &Path, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("read {}/{file}: {e}", dir.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}/{file} has no {key}: {text}", dir.display()))
}

/// rbytes summed over the devices of a cgroup's io.stat.
fn io_read_bytes(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("io.stat"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("rbytes=")?.parse::<u64>().ok())
        .sum()
}

struct Variant {
    label: &'static str,
    handler: Handler,
    rund_config: Option<&'static str>,
}

#[derive(Default)]
struct Row {
    label: &'static str,
    pods: usize,
    failures: Vec<String>,
    dying_after: u64,
    dying_later: u64,
    delete_ms: Vec<f64>,
    wall: Duration,
    /// Major faults in the pods (hierarchical: gone pods included): the re-reads.
    majfaults: u64,
    /// What the top still has charged 30 s after the churn (held by dying cgroups), KiB.
    current_kib: u64,
    file_kib: u64,
    shmem_kib: u64,
    /// Bytes the pods read from disk (io.stat rbytes, hierarchical), KiB: the re-reads.
    read_kib: u64,
}

/// One pod: RunPodSandbox, a container that reads and writes then exits 0, then the delete
/// path (StopPodSandbox + RemovePodSandbox, timed) and the kubelet's rmdir of the pod cgroup.
fn one_pod(fx: &CriFixture, top_rel: &str, i: usize) -> Result<f64, String> {
    let root = Path::new(ROOT);
    let uid = format!("churn{i:04}x{}", std::process::id());
    let pod_rel = format!("{top_rel}/besteffort/pod{uid}");
    make_cgroup_like_the_kubelet(root, &pod_rel);
    let pod = PodSpec {
        uid: uid.clone(),
        ..PodSpec::new(&format!("churn-{i}"), &format!("/{pod_rel}"))
    };
    let cri = &fx.cri;
    let pod_id = cri
        .run_pod_sandbox(&pod, fx.handler.name())
        .map_err(|e| format!("RunPodSandbox: {e}"))?;
    let ran = match workload() {
        None => Ok(()),
        Some(script) => {
    let work = ContainerSpec::new("work", BUSYBOX_IMAGE, &["sh", "-c", &script]);
    cri
        .create_and_start(&pod_id, &work, &pod)
        .map_err(|e| format!("create/start: {e}"))
        .and_then(|id| {
            let deadline = Instant::now() + EXIT_WAIT;
            loop {
                match cri.container_status(&id) {
                    Ok(s) if s.state == ContainerState::ContainerExited as i32 => {
                        break if s.exit_code == 0 {
                            Ok(())
                        } else {
                            Err(format!("workload exited {}", s.exit_code))
                        };
                    }
                    Ok(_) if Instant::now() < deadline => {}
                    Ok(s) => break Err(format!("not exited after {EXIT_WAIT:?}: {s:?}")),
                    Err(e) => break Err(format!("ContainerStatus: {e}")),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        }
    };
    let t0 = Instant::now();
    let deleted = cri
        .stop_pod_sandbox(&pod_id)
        .map_err(|e| format!("StopPodSandbox: {e}"))
        .and_then(|()| {
            cri.remove_pod_sandbox(&pod_id)
                .map_err(|e| format!("RemovePodSandbox: {e}"))
        });
    let delete_ms = t0.elapsed().as_secs_f64() * 1e3;
    if ran.is_err() || deleted.is_err() {
        cri.remove_pod(&pod_id);
    }
    let dir = root.join(&pod_rel);
    if std::env::var("RUND_CHURN_KEEP").is_ok() {
        // Probe: wait until rund/runc removed their children, then keep the pod cgroup.
        let deadline = Instant::now() + Duration::from_secs(30);
        while keyed(&dir, "cgroup.stat", "nr_descendants") > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("pod {i}: inner dying right after {}", keyed(&dir, "cgroup.stat", "nr_dying_descendants"));
        KEPT.lock().unwrap().push(dir.clone());
        return ran.and(deleted).map(|()| delete_ms);
    }
    // The kubelet's rmdir: it retries a busy pod cgroup, so give it a moment too.
    let deadline = Instant::now() + Duration::from_secs(30);
    let removed = loop {
        match std::fs::remove_dir(&dir) {
            Ok(()) => break Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => break Err(format!("kubelet rmdir {}: {e}", dir.display())),
        }
    };
    ran.and(deleted).and(removed).map(|()| delete_ms)
}

fn churn(v: &Variant, n: usize) -> Option<Row> {
    let opts = ContainerdOpts {
        debug: false,
        rund_config: v.rund_config.map(str::to_owned),
        ..ContainerdOpts::new()
    };
    let fx = CriFixture::start(v.handler, "churn_v2", opts)?;
    let top_rel = format!("{}/kubepods", fx.ctd.cgroup_parent.trim_start_matches('/'));
    let top: PathBuf = Path::new(ROOT).join(&top_rel);
    make_cgroup_like_the_kubelet(Path::new(ROOT), &format!("{top_rel}/besteffort"));
    let mut row = Row {
        label: v.label,
        pods: n,
        ..Row::default()
    };
    let start = Instant::now();
    for i in 0..n {
        match one_pod(&fx, &top_rel, i) {
            Ok(ms) => row.delete_ms.push(ms),
            Err(e) => {
                eprintln!("{}: pod {i}: {e}", v.label);
                row.failures.push(format!("pod {i}: {e}"));
            }
        }
        if (i + 1) % 10 == 0 {
            eprintln!(
                "{}: {} pods, {:.0} s, dying {}",
                v.label,
                i + 1,
                start.elapsed().as_secs_f64(),
                keyed(&top, "cgroup.stat", "nr_dying_descendants")
            );
        }
    }
    row.wall = start.elapsed();
    row.dying_after = keyed(&top, "cgroup.stat", "nr_dying_descendants");
    dump(&top, "top right after");
    std::thread::sleep(LATER);
    row.dying_later = keyed(&top, "cgroup.stat", "nr_dying_descendants");
    dump(&top, "top 30 s later");
    let kept = std::mem::take(&mut *KEPT.lock().unwrap());
    if !kept.is_empty() {
        let inner: Vec<u64> = kept.iter().map(|d| keyed(d, "cgroup.stat", "nr_dying_descendants")).collect();
        eprintln!("{}: inner dying per pod 30 s later: {inner:?}", v.label);
        if let Some(long) = std::env::var("RUND_CHURN_LONG").ok().and_then(|v| v.parse().ok()) {
            std::thread::sleep(Duration::from_secs(long));
            let inner: Vec<u64> = kept.iter().map(|d| keyed(d, "cgroup.stat", "nr_dying_descendants")).collect();
            eprintln!("{}: inner dying per pod {long} s after that: {inner:?}", v.label);
        }
        for (k, d) in kept.iter().enumerate().take(3) {
            dump(d, &format!("pod {k}"));
        }
        for d in &kept {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("rmdir {}: {e}", d.display());
            }
        }
        eprintln!("{}: top dying right after the pods' rmdir: {}", v.label, keyed(&top, "cgroup.stat", "nr_dying_descendants"));
        std::thread::sleep(Duration::from_secs(5));
        eprintln!("{}: top dying 5 s after the pods' rmdir: {}", v.label, keyed(&top, "cgroup.stat", "nr_dying_descendants"));
        row.dying_later = keyed(&top, "cgroup.stat", "nr_dying_descendants");
    }
    row.majfaults = keyed(&top, "memory.stat", "pgmajfault");
    row.current_kib = std::fs::read_to_string(top.join("memory.current"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .expect("memory.current of the top")
        / 1024;
    row.file_kib = keyed(&top, "memory.stat", "file") / 1024;
    row.shmem_kib = keyed(&top, "memory.stat", "shmem") / 1024;
    row.read_kib = io_read_bytes(&top) / 1024;
    let _ = std::fs::remove_dir(top.join("besteffort"));
    let _ = std::fs::remove_dir(&top);
    fx.finish();
    Some(row)
}

#[test]
#[ignore = "long: run by make churn-v2 in the VM"]
fn pod_churn_dying_cgroups() {
    let test = "pod_churn_dying_cgroups";
    if !pure_v2() {
        rund_tests::skip!("{test}: needs pure cgroup v2 (make churn-v2 runs it in the VM)");
    }
    let n = env_size("RUND_CHURN_PODS", 200);
    let variants = [
        Variant {
            label: "runc",
            handler: Handler::Runc,
            rund_config: None,
        },
        Variant {
            label: "rund, reclaim_on_remove = true",
            handler: Handler::Rund,
            rund_config: Some("[cgroup]\nreclaim_on_remove = true\n"),
        },
        Variant {
            label: "rund, reclaim_on_remove = false",
            handler: Handler::Rund,
            rund_config: Some("[cgroup]\nreclaim_on_remove = false\n"),
        },
    ];
    let pick = std::env::var("RUND_CHURN_VARIANTS").unwrap_or_else(|_| "runc:on:off".into());
    let keys = ["runc", "on", "off"];
    let mut rows = Vec::new();
    for (v, key) in variants.iter().zip(keys) {
        if !pick.split(':').any(|p| p == key) {
            continue;
        }
        let Some(row) = churn(v, n) else {
            return;
        };
        rows.push(row);
    }
    println!(
        "\n=== pod churn on cgroup v2: {n} kubelet-shaped pods per handler, one at a time ==="
    );
    println!(
        "| handler | N | failed | dying right after | dying after 30 s | median delete ms \
         | total wall s | pgmajfault | read KiB | charged KiB after 30 s (file, shmem) |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} ({}, {}) |",
            r.label,
            r.pods,
            r.failures.len(),
            r.dying_after,
            r.dying_later,
            median(&r.delete_ms),
            r.wall.as_secs_f64(),
            r.majfaults,
            r.read_kib,
            r.current_kib,
            r.file_kib,
            r.shmem_kib
        );
    }
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.label)))
        .collect();
    assert!(failures.is_empty(), "churn failures: {failures:#?}");
    if rows.len() < 2 { return; }
    let (runc, reclaim) = (&rows[0], &rows[1]);
    assert!(
        reclaim.dying_later < runc.dying_later,
        "rund with reclaim_on_remove leaves {} dying cgroups 30 s after {n} pods, runc {}",
        reclaim.dying_later,
        runc.dying_later
    );
}

#[test]
#[ignore = "long: run by make churn-v2 in the VM"]
fn single_start_medians() {
    let test = "single_start_medians";
    if !pure_v2() {
        rund_tests::skip!("{test}: needs pure cgroup v2 (make churn-v2 runs it in the VM)");
    }
    let n = env_size("RUND_CHURN_STARTS", 10);
    let opts = ContainerdOpts {
        debug: false,
        ..ContainerdOpts::new().with_runc()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(test, opts) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().expect("busybox rootfs");
    let runtimes = [RUNC_RUNTIME, RUND_RUNTIME];
    let start = |rt: &str, id: &str| -> Result<f64, String> {
        let t0 = Instant::now();
        let out = ctd
            .run(id, &rootfs, &["true"], rt)
            .map_err(|e| e.to_string())?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if out.code() != 0 {
            return Err(format!("{rt} {id}: {out:?}"));
        }
        Ok(ms)
    };
    let mut failures = Vec::new();
    // One start each first, so neither pays for a cold cache.
    for (k, rt) in runtimes.iter().enumerate() {
        if let Err(e) = start(rt, &format!("warm{k}")) {
            failures.push(e);
        }
    }
    let mut ms: [Vec<f64>; 2] = Default::default();
    for i in 0..n {
        // Alternate which runtime goes first.
        for j in 0..2 {
            let k = (i + j) % 2;
            match start(runtimes[k], &format!("s{k}x{i}")) {
                Ok(t) => ms[k].push(t),
                Err(e) => failures.push(e),
            }
        }
    }
    println!(
        "\n=== single start on cgroup v2: `ctr run --rm` busybox `true`, {n} each, alternating ==="
    );
    println!("| runtime | n | median ms | min ms | max ms |");
    println!("|---|--:|--:|--:|--:|");
    for (k, rt) in runtimes.iter().enumerate() {
        let min = ms[k].iter().copied().fold(f64::INFINITY, f64::min);
        let max = ms[k].iter().copied().fold(0.0, f64::max);
        println!(
            "| {rt} | {} | {:.0} | {min:.0} | {max:.0} |",
            ms[k].len(),
            median(&ms[k])
        );
    }
    println!(
        "rund / runc-v2 median ratio: {:.2}",
        median(&ms[1]) / median(&ms[0])
    );
    assert!(failures.is_empty(), "start failures: {failures:#?}");
}
