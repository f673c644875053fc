//! The cgroup head start (`[sandbox] head_start`, per-pod mode), on the shim binary driven
//! directly through its `start` action, as containerd runs it: the server `start` forks begins the cgroup of its pod's first container before
//! Create arrives, and that Create takes it (its phases say how long before). A Create that
//! wants another cgroup gets its own, and the head start's goes; a shim that gets no Create, or
//! crashes before one, leaves none behind; `head_start = false` makes none early.
//!
//! Needs root and rund's binaries; skipped with a message otherwise (`RUND_REQUIRE_BINS=1`
//! makes missing binaries a failure).

use std::path::Path;
use std::time::{Duration, Instant};

use rund_tests::shim::residue::cgroup_dirs_for;
use rund_tests::shim::{run_action, settle, unique_id, Bundle, Direct};
use rund_tests::RundBins;
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(10);
const LIMIT: u64 = 64 << 20;

fn setup(test: &str) -> Option<RundBins> {
    rund_tests::shim::direct_setup(test)
}

/// A shim for a `sleep 30` container limited to [`LIMIT`] bytes, with `edit` applied to the
/// spec and `config` appended to the shim's rund config.
async fn direct(
    bins: &RundBins,
    prefix: &str,
    edit: impl FnOnce(&mut Value),
    config: &str,
) -> Direct {
    let bundle = Bundle::new(&unique_id(prefix)).unwrap();
    let mut spec = bundle.spec(rund_tests::shim::busybox_rootfs(), &["sleep", "30"]);
    spec["linux"]["resources"]["memory"] = json!({ "limit": LIMIT });
    edit(&mut spec);
    bundle.write_config(&spec).unwrap();
    Direct::start_forked(bins, bundle, config).await.unwrap()
}

/// [`direct`], once its head start has made the cgroup, limit and all, before any Create;
/// with the cgroup's path.
async fn early(
    bins: &RundBins,
    prefix: &str,
    edit: impl FnOnce(&mut Value),
    config: &str,
) -> (Direct, String) {
    let d = direct(bins, prefix, edit, config).await;
    let path = d.bundle.cgroups_path.clone();
    assert_eq!(
        await_limit(&path, LIMIT),
        Some(LIMIT),
        "{}",
        d.diagnostics()
    );
    (d, path)
}

/// `[trace] phases_file` in a dir of its own.
fn phases() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[trace]\nphases_file = {:?}\n",
        dir.path().join("phases.jsonl")
    );
    (dir, text)
}

/// The `extra` figures of `id`'s Create.
fn extras(dir: &tempfile::TempDir, id: &str) -> Value {
    let text = std::fs::read_to_string(dir.path().join("phases.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("no phase record for {id}: {text}"))["extra"]
        .clone()
}

/// Waits until the cgroup at `path` has the memory limit `want` (it is made before its
/// limit is written), and returns the limit it last had.
fn await_limit(path: &str, want: u64) -> Option<u64> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = limit_of(path);
        if got == Some(want) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The memory limit of a cgroup dir (v1's memory hierarchy, or v2), if it has one.
fn memory_limit(dir: &Path) -> Option<u64> {
    ["memory.limit_in_bytes", "memory.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .and_then(|s| s.trim().parse().ok())
}

fn limit_of(path: &str) -> Option<u64> {
    cgroup_dirs_for(path).iter().find_map(|d| memory_limit(d))
}

/// Kills, waits for and deletes the container, then [`shut_down_clean`].
async fn end(d: Direct, path: &str) {
    d.kill_process("", 9).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    shut_down_clean(d, path).await;
}

/// Shutdown: the shim exits by itself, and nothing of the cgroup at `path` (nor a mount or an
/// agent) remains.
async fn shut_down_clean(d: Direct, path: &str) {
    let (pid, bundle) = (d.shim.pid, d.bundle.path.clone());
    let ended = d.finish().await;
    assert!(ended.by_itself, "an idle shim exits on Shutdown: {ended:?}");
    let r = settle(pid, &bundle, path, SETTLE);
    assert!(r.is_empty(), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_cgroup_is_made_before_create_and_create_takes_it() {
    let Some(bins) = setup("the_pods_cgroup_is_made_before_create") else {
        return;
    };
    let (dir, config) = phases();
    // No Create has been sent: the cgroup, limit and all, is the head start's.
    let (d, path) = early(&bins, "cghead", |_| {}, &config).await;
    let dirs = cgroup_dirs_for(&path);
    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.start_process("").await.unwrap();
    let procs: Vec<i32> = dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|s| s.lines().filter_map(|l| l.parse().ok()).collect::<Vec<_>>())
        .collect();
    assert!(
        procs.contains(&(created.pid as i32)),
        "the init {} is not in {dirs:?}: {procs:?}",
        created.pid
    );
    let x = extras(&dir, &d.bundle.id);
    for figure in ["cgroup_lead", "cgroup_made", "cgroup_cpu"] {
        assert!(
            x[figure].as_f64().is_some_and(|v| v >= 0.0),
            "{figure}: {x}"
        );
    }
    assert!(x["cgroup_lead"].as_f64().unwrap() > 0.0, "{x}");
    end(d, &path).await;
}

/// A Create whose spec changed since `start` (another path; the same path with another limit)
/// gets the cgroup it asks for, and the head start's is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_wants_another_cgroup_gets_it_and_the_early_one_goes() {
    let Some(bins) = setup("a_create_that_wants_another_cgroup") else {
        return;
    };
    for other_path in [true, false] {
        eprintln!("case: another path: {other_path}");
        let (dir, config) = phases();
        let (d, made) = early(&bins, "cgother", |_| {}, &config).await;
        let wanted = if other_path {
            format!("{made}-b")
        } else {
            made.clone()
        };
        let mut spec: Value = serde_json::from_str(
            &std::fs::read_to_string(d.bundle.path.join("config.json")).unwrap(),
        )
        .unwrap();
        spec["linux"]["cgroupsPath"] = json!(wanted);
        spec["linux"]["resources"]["memory"]["limit"] = json!(2 * LIMIT);
        d.bundle.write_config(&spec).unwrap();
        d.create()
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
        assert_eq!(limit_of(&wanted), Some(2 * LIMIT), "{}", d.diagnostics());
        if other_path {
            let r = settle(0, Path::new("/nonexistent"), &made, SETTLE);
            assert!(r.cgroups.is_empty(), "the early cgroup stayed: {r}");
        }
        let x = extras(&dir, &d.bundle.id);
        assert!(x.get("cgroup_lead").is_none(), "not the head start's: {x}");
        assert!(x["cgroup_made"].is_number(), "{x}");
        end(d, &wanted).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_shut_down_before_any_create_leaves_no_cgroup() {
    let Some(bins) = setup("a_shim_shut_down_before_any_create") else {
        return;
    };
    let (d, path) = early(&bins, "cgnone", |_| {}, "").await;
    shut_down_clean(d, &path).await;
}

/// The pool's state dir for the direct tests' cgroup parent, if the pool keeps one (v1).
fn pool_state_dir() -> Option<std::path::PathBuf> {
    let state = format!(
        "{}/state-{}/cgroup-pool",
        rund_tests::shim::DIRECT_BASE,
        std::process::id()
    );
    let want = rund_tests::shim::cgroup_parent();
    std::fs::read_dir(state).ok()?.flatten().find_map(|e| {
        let meta = std::fs::read_to_string(e.path().join("meta.json")).ok()?;
        let rel = serde_json::from_str::<Value>(&meta).ok()?["rel"]
            .as_str()?
            .to_string();
        (format!("/{rel}") == want).then(|| e.path())
    })
}

/// A shim killed before any Create: `delete` removes the cgroup its head start made. On v1,
/// where the pool keeps state for the parent, a second `delete` (the cgroup gone now, as when
/// the shim died before its claim ended) removes a temp file a writer killed mid-update of that
/// state would leave (one made here, named for a pid that runs nowhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_after_a_crash_before_create_removes_the_early_cgroup() {
    let Some(bins) = setup("delete_after_a_crash_before_create") else {
        return;
    };
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if !v2 {
        // A long-lived parent: the pool keeps a state dir for it.
        let config = rund_tests::shim::process_config().unwrap();
        let parent = rund_tests::shim::cgroup_parent();
        let out = std::process::Command::new(bins.path(rund_tests::bins::CLI_BIN))
            .arg("--config")
            .arg(config)
            .args(["pool", "warm", &parent, "--slots", "1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (mut d, path) = early(&bins, "cgcrash", |_| {}, "").await;
    d.shim.crash().await;
    let out = run_action(&bins, &d.bundle, "delete").unwrap();
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let r = settle(0, &d.bundle.path, &path, SETTLE);
    assert!(r.cgroups.is_empty(), "delete left the early cgroup: {r}");

    let stale = pool_state_dir().map(|dir| dir.join("counters.json.tmp-7ffffffe-1-0"));
    assert_eq!(stale.is_some(), !v2, "a pool state dir exactly on v1");
    if let Some(f) = stale {
        std::fs::write(&f, "{").unwrap();
        let out = run_action(&bins, &d.bundle, "delete").unwrap();
        assert_eq!(out.code(), 0, "{}", out.stderr);
        assert!(!f.exists(), "delete left {}", f.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_start_false_makes_the_cgroup_in_create() {
    let Some(bins) = setup("head_start_false_makes_the_cgroup_in_create") else {
        return;
    };
    let (dir, config) = phases();
    let config = format!("{config}[sandbox]\nhead_start = false\n");
    let d = direct(&bins, "cgcold", |_| {}, &config).await;
    let path = d.bundle.cgroups_path.clone();
    assert!(
        cgroup_dirs_for(&path).is_empty(),
        "a cgroup before Create with head_start = false"
    );
    d.create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    assert_eq!(limit_of(&path), Some(LIMIT), "{}", d.diagnostics());
    let x = extras(&dir, &d.bundle.id);
    assert!(x.get("cgroup_lead").is_none(), "{x}");
    assert!(x["cgroup_made"].is_number(), "{x}");
    end(d, &path).await;
}

/// A refused Create takes the early cgroup down with it, before it answers: refused by a bad
/// annotation (which `start` does not judge), or by a config.json that went bad since `start`
/// (refused before any of Create's steps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_leaves_no_early_cgroup() {
    let Some(bins) = setup("a_refused_create_leaves_no_early_cgroup") else {
        return;
    };
    for malformed in [false, true] {
        eprintln!("case: config.json malformed since start: {malformed}");
        let bad = |s: &mut Value| {
            if !malformed {
                s["annotations"] = json!({ "rund.io/grace-period-seconds": "soon" });
            }
        };
        let (d, path) = early(&bins, "cgbad", bad, "").await;
        if malformed {
            d.bundle.write_config_raw("{not json").unwrap();
        }
        let err = d.create().await.expect_err("a refused Create");
        let (code, msg) = rund_tests::shim::status_of(&err).expect("a status");
        assert_eq!(
            code,
            containerd_shim_protos::ttrpc::Code::INVALID_ARGUMENT,
            "{msg}"
        );
        let says = if malformed {
            "config.json is malformed"
        } else {
            "rund.io/grace-period-seconds"
        };
        assert!(msg.contains(says), "{msg}");
        // At once: the Create answered after the removal.
        assert!(cgroup_dirs_for(&path).is_empty(), "after {msg}");
        shut_down_clean(d, &path).await;
    }
}
