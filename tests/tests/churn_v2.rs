//! Pod churn on pure cgroup v2, where Kubernetes shows dying cgroups, and single-start medians
//! rund vs runc-v2. Both are ignored (long): `make churn-v2` runs them in the VM.
//!
//! Churn: for runc, rund with its default config and rund with `[cgroup] reclaim_on_remove =
//! true`, each on a private CRI containerd, N kubelet-shaped pods one after another (each its
//! own pod cgroup under a `kubepods/besteffort` the test makes as the kubelet's cgroupfs driver
//! does). The container reads a file from the image and writes 4 MiB into its rootfs, then
//! exits; the pod is stopped and removed and its cgroup rmdir'd. `nr_dying_descendants` of the
//! top is read right after and 30 s later. In the VM the page cache is dropped before each
//! handler's run, so the first pod reads the image from disk and reclaim's re-reads show.
//!
//! Knobs: `RUND_CHURN_PODS` (N, default 200), `RUND_CHURN_STARTS` (starts per runtime, default
//! 10), `RUND_CHURN_VARIANTS` (`runc:rund:reclaim`, any subset), `RUND_CHURN_WORKLOAD` (`write`
//! as above, `read` without the write, `sync` with a sync after it, `none`: no container), and
//! `RUND_CHURN_KEEP=1`, which keeps the pod cgroups until the end and prints how many of each
//! pod's children (sandbox, container) are still dying 30 s later, before removing them.

use std::os::unix::fs::MetadataExt;
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
/// How long after the churn the dying count is read again.
const LATER: Duration = Duration::from_secs(30);
/// Under TCG a container takes seconds; only a hung one trips this.
const EXIT_WAIT: Duration = Duration::from_secs(300);
const READ: &str = "cat /bin/busybox > /dev/null";
const WRITE: &str = "dd if=/dev/zero of=/f bs=1M count=4 2>/dev/null";
/// The block major of loop devices.
const LOOP_MAJOR: u32 = 7;

fn pure_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists() && !Path::new(ROOT).join("memory").is_dir()
}

fn env_size(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The container's script for `RUND_CHURN_WORKLOAD`; `None`: a pod without a container.
fn workload() -> Option<String> {
    let w = std::env::var("RUND_CHURN_WORKLOAD").unwrap_or_else(|_| "write".into());
    match w.as_str() {
        "none" => None,
        "read" => Some(READ.into()),
        "write" => Some(format!("{READ} && {WRITE}")),
        "sync" => Some(format!("{READ} && {WRITE} && sync")),
        other => panic!("RUND_CHURN_WORKLOAD: {other} is none, read, write or sync"),
    }
}

/// One `key value` line of a flat-keyed cgroup file.
fn keyed(dir: &Path, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("read {}/{file}: {e}", dir.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}/{file} has no {key}: {text}", dir.display()))
}

fn dying(dir: &Path) -> u64 {
    keyed(dir, "cgroup.stat", "nr_dying_descendants")
}

/// rbytes summed over the devices of a cgroup's io.stat.
fn io_read_bytes(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("io.stat"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("rbytes=")?.parse::<u64>().ok())
        .sum()
}

/// Whether `path` is on a loop device: the loop driver's per-cgroup workers keep each writer's
/// io cgroup (so its whole cgroup) alive for a minute or two after its last write, for every
/// runtime alike. A node's containerd root is on a disk; `make churn-v2` gives the VM one.
fn on_loop_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| dev_major(m.dev()) == LOOP_MAJOR)
}

fn dev_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

struct Variant {
    key: &'static str,
    label: &'static str,
    handler: Handler,
    rund_config: Option<&'static str>,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        key: "runc",
        label: "runc",
        handler: Handler::Runc,
        rund_config: None,
    },
    Variant {
        key: "rund",
        label: "rund, default config",
        handler: Handler::Rund,
        rund_config: Some(""),
    },
    Variant {
        key: "reclaim",
        label: "rund, reclaim_on_remove = true",
        handler: Handler::Rund,
        rund_config: Some("[cgroup]\nreclaim_on_remove = true\n"),
    },
];

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
    /// Bytes the pods read from disk (io.stat, hierarchical), KiB: the re-reads.
    read_kib: u64,
    /// What the top still has charged 30 s after the churn (held by dying cgroups), KiB.
    current_kib: u64,
    file_kib: u64,
    shmem_kib: u64,
    /// containerd's root was on a loop device.
    on_loop: bool,
}

/// Runs the container and waits until it exited 0.
fn run_container(fx: &CriFixture, pod_id: &str, pod: &PodSpec, script: &str) -> Result<(), String> {
    let cri = &fx.cri;
    let work = ContainerSpec::new("work", BUSYBOX_IMAGE, &["sh", "-c", script]);
    let id = cri
        .create_and_start(pod_id, &work, pod)
        .map_err(|e| format!("create/start: {e}"))?;
    let deadline = Instant::now() + EXIT_WAIT;
    loop {
        match cri.container_status(&id) {
            Ok(s) if s.state == ContainerState::ContainerExited as i32 => {
                return match s.exit_code {
                    0 => Ok(()),
                    c => Err(format!("workload exited {c}")),
                };
            }
            Ok(_) if Instant::now() < deadline => {}
            Ok(s) => return Err(format!("not exited after {EXIT_WAIT:?}: {s:?}")),
            Err(e) => return Err(format!("ContainerStatus: {e}")),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `f` for up to 30 s (the kubelet retries a busy pod cgroup too).
fn retry<T>(mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            r => return r,
        }
    }
}

/// One pod: RunPodSandbox, a container that reads and writes then exits 0, then the delete
/// path (StopPodSandbox + RemovePodSandbox, timed) and the kubelet's rmdir of the pod cgroup
/// (or, with `keep`, the pod cgroup once rund or runc removed their children). Returns the
/// delete time.
fn one_pod(
    fx: &CriFixture,
    top_rel: &str,
    i: usize,
    keep: &mut Vec<PathBuf>,
) -> Result<f64, String> {
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
    let ran = workload().map_or(Ok(()), |w| run_container(fx, &pod_id, &pod, &w));
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
    let removed = if std::env::var("RUND_CHURN_KEEP").is_ok_and(|v| v == "1") {
        keep.push(dir.clone());
        retry(|| match keyed(&dir, "cgroup.stat", "nr_descendants") {
            0 => Ok(()),
            n => Err(format!("{n} children left in {}", dir.display())),
        })
    } else {
        retry(|| {
            std::fs::remove_dir(&dir).map_err(|e| format!("kubelet rmdir {}: {e}", dir.display()))
        })
    };
    ran.and(deleted).and(removed).map(|()| delete_ms)
}

/// Evicts the page cache (in the VM only), so each handler's first pod reads from disk.
fn cold_cache() {
    if std::env::var("RUND_SUITE").is_ok_and(|s| s == "v2") {
        let _ = std::process::Command::new("sync").status();
        std::fs::write("/proc/sys/vm/drop_caches", "1").expect("drop_caches");
    }
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
    row.on_loop = on_loop_device(&fx.ctd.dir);
    let mut kept = Vec::new();
    cold_cache();
    let start = Instant::now();
    for i in 0..n {
        match one_pod(&fx, &top_rel, i, &mut kept) {
            Ok(ms) => row.delete_ms.push(ms),
            Err(e) => {
                eprintln!("{}: pod {i}: {e}", v.label);
                row.failures.push(format!("pod {i}: {e}"));
            }
        }
        if (i + 1) % 10 == 0 {
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "{}: {} pods, {secs:.0} s, dying {}",
                v.label,
                i + 1,
                dying(&top)
            );
        }
    }
    row.wall = start.elapsed();
    row.dying_after = dying(&top);
    std::thread::sleep(LATER);
    row.dying_later = dying(&top);
    row.majfaults = keyed(&top, "memory.stat", "pgmajfault");
    row.read_kib = io_read_bytes(&top) / 1024;
    row.current_kib = std::fs::read_to_string(top.join("memory.current"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .expect("memory.current of the top")
        / 1024;
    row.file_kib = keyed(&top, "memory.stat", "file") / 1024;
    row.shmem_kib = keyed(&top, "memory.stat", "shmem") / 1024;
    if !kept.is_empty() {
        // Which pods' children are still dying; then the pod cgroups themselves go.
        let per_pod: Vec<u64> = kept.iter().map(|d| dying(d)).collect();
        eprintln!(
            "{}: dying children per pod {LATER:?} after the churn: {per_pod:?}",
            v.label
        );
        for d in &kept {
            if let Err(e) = std::fs::remove_dir(d) {
                row.failures.push(format!("rmdir {}: {e}", d.display()));
            }
        }
        std::thread::sleep(Duration::from_secs(5));
        row.dying_later = dying(&top);
        eprintln!(
            "{}: dying 5 s after the pod cgroups' rmdir: {}",
            v.label, row.dying_later
        );
    }
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
    let pick = std::env::var("RUND_CHURN_VARIANTS").unwrap_or_else(|_| "runc:rund:reclaim".into());
    let mut rows = Vec::new();
    for v in VARIANTS
        .iter()
        .filter(|v| pick.split(':').any(|p| p == v.key))
    {
        let Some(row) = churn(v, n) else {
            return;
        };
        rows.push(row);
    }
    let loop_dev = rows.iter().any(|r| r.on_loop);
    println!(
        "\n=== pod churn on cgroup v2: {n} kubelet-shaped pods per handler, one at a time, \
         workload {}, containerd's root on {} ===",
        std::env::var("RUND_CHURN_WORKLOAD").unwrap_or_else(|_| "write".into()),
        if loop_dev { "a loop device" } else { "a disk" }
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
    let (Some(runc), Some(rund)) = (
        rows.iter().find(|r| r.label == VARIANTS[0].label),
        rows.iter().find(|r| r.label == VARIANTS[1].label),
    ) else {
        return;
    };
    if loop_dev {
        // Every writer's cgroup stays dying while the loop worker holds it: not rund's doing.
        println!("containerd's root is on a loop device: rund vs runc is not asserted");
        return;
    }
    println!(
        "result: rund (default config) leaves {} dying cgroups 30 s after {n} pods, runc {}",
        rund.dying_later, runc.dying_later
    );
    assert!(
        rund.dying_later < runc.dying_later,
        "rund (default config) leaves {} dying cgroups 30 s after {n} pods, runc {}",
        rund.dying_later,
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
