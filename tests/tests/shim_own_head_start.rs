//! The head start of a pod the warm template does not fit (`[sandbox] head_start`, per-pod
//! mode), on the shim binary driven through its `start` action as containerd runs it: the
//! server `start` forks launches the pod's own agent before Create arrives, in the pod's user
//! namespace with ids it leases for the pod, and the Create takes that agent when it would
//! launch the same. A Create that would launch otherwise gets its own agent, and the early one
//! is killed; a shim shut down before any Create leaves no agent and frees the ids.
//!
//! Needs root and rund's binaries; skipped with a message otherwise (`RUND_REQUIRE_BINS=1`
//! makes missing binaries a failure).

use std::time::{Duration, Instant};

use rund_tests::pernode::{agents_of, gone_within, ppid_and_comm};
use rund_tests::shim::{
    process_config_with, run_action_env, settle, unique_id, Bundle, Direct, DIRECT_BASE,
};
use rund_tests::RundBins;
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(10);

/// The tests of this file run one at a time: the orphan check counts every agent whose parent
/// is no shim, and a sibling test's agent whose shim has just exited is one for a moment.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const USERNS: &str = "[userns]\nmode = \"always\"\n";

/// `config` with `[trace] phases_file` in a dir of its own.
fn traced(config: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{config}[trace]\nphases_file = {:?}\n",
        dir.path().join("phases.jsonl")
    );
    (dir, text)
}

/// Whether `id`'s Create took the agent launched ahead (`head_taken` in its phases).
fn took_head(dir: &tempfile::TempDir, id: &str) -> bool {
    let text = std::fs::read_to_string(dir.path().join("phases.jsonl")).unwrap_or_default();
    let record = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("no phase record for {id}: {text}"));
    record["extra"]["head_taken"].is_number()
}

fn setup(test: &str) -> Option<RundBins> {
    rund_tests::shim::direct_setup(test)
}

/// A shim for a `sleep 30` container under `config`, through `start`, once its head start's
/// agent runs (with its pid).
async fn early(bins: &RundBins, prefix: &str, config: &str) -> (Direct, u32) {
    let bundle = Bundle::new(&unique_id(prefix)).unwrap();
    let spec = bundle.spec(rund_tests::shim::busybox_rootfs(), &["sleep", "30"]);
    bundle.write_config(&spec).unwrap();
    let d = Direct::start_forked(bins, bundle, config).await.unwrap();
    let deadline = Instant::now() + SETTLE;
    let agent = loop {
        if let [agent] = agents_of(d.shim.pid)[..] {
            break agent;
        }
        assert!(
            Instant::now() < deadline,
            "no agent launched ahead of Create:\n{}",
            d.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (d, agent)
}

fn lease_file() -> String {
    let file = format!(
        "{DIRECT_BASE}/state-{}/userns/leases.json",
        std::process::id()
    );
    std::fs::read_to_string(file).unwrap_or_default()
}

/// This test process's lease entries (the direct shims' state dir) for `id`: (owner pid, host
/// base) each.
fn leases_of(id: &str) -> Vec<(u64, u64)> {
    let text = lease_file();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v["leases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["sandbox_id"].as_str() == Some(id))
        .map(|e| {
            (
                e["owner"]["pid"].as_u64().unwrap_or(0),
                e["host_base"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The sizes of `pid`'s copies of rund-init (its `memfd:rund-init` fds).
fn init_copies(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:rund-init"))
        })
        .filter_map(|e| std::fs::metadata(e.path()).ok().map(|m| m.len()))
        .collect()
}

/// The first line of `pid`'s uid_map, as (inside, outside, count).
fn uid_map(pid: u32) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let n: Vec<u64> = text
        .split_whitespace()
        .take(3)
        .map(|f| f.parse().unwrap())
        .collect();
    (n[0], n[1], n[2])
}

/// Kills, waits for and deletes the container, then Shutdown: the shim exits by itself and
/// leaves nothing.
async fn end(d: Direct) {
    d.kill_process("", 9).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    shut_down_clean(d).await;
}

async fn shut_down_clean(d: Direct) {
    let (pid, bundle, id) = (d.shim.pid, d.bundle.path.clone(), d.bundle.id.clone());
    let path = d.bundle.cgroups_path.clone();
    let ended = d.finish().await;
    assert!(ended.by_itself, "an idle shim exits on Shutdown: {ended:?}");
    let r = settle(pid, &bundle, &path, SETTLE);
    assert!(r.is_empty(), "{r}");
    assert_eq!(leases_of(&id), Vec::new(), "the pod's ids are freed");
}

/// The agent launched ahead runs in a user namespace with the ids leased to the pod while no
/// Create has come; the Create takes that very agent, and its container runs in the same
/// user namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_userns_pods_agent_is_launched_ahead_with_its_ids_and_taken() {
    let _serial = SERIAL.lock().await;
    let Some(bins) = setup("a_userns_pods_agent_is_launched_ahead") else {
        return;
    };
    let (phases, config) = traced(USERNS);
    let (d, agent) = early(&bins, "ownhead", &config).await;
    let leased = leases_of(&d.bundle.id);
    assert_eq!(leased.len(), 1, "{leased:?}");
    assert_eq!(leased[0].0, d.shim.pid as u64, "leased by the shim ahead");
    let (inside, outside, _) = uid_map(agent);
    assert_eq!(
        (inside, outside),
        (0, leased[0].1),
        "the agent's map is the lease"
    );

    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    assert_eq!(agents_of(d.shim.pid), vec![agent], "{}", d.diagnostics());
    assert!(took_head(&phases, &d.bundle.id), "{}", d.diagnostics());
    d.start_process("").await.unwrap();
    assert_eq!(uid_map(created.pid).1, leased[0].1, "the container's map");
    assert_eq!(
        init_copies(agent),
        vec![0],
        "rund-init's copy is made at launch, and filled only for a container that runs it"
    );
    assert_eq!(
        leases_of(&d.bundle.id),
        vec![(agent as u64, leased[0].1)],
        "the agent owns the ids now"
    );
    end(d).await;
}

/// A Create whose spec changed since `start` (another hostname) launches its own agent with
/// the same ids, and the one launched ahead is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_launches_otherwise_gets_its_own_agent() {
    let _serial = SERIAL.lock().await;
    let Some(bins) = setup("a_create_that_launches_otherwise") else {
        return;
    };
    let (phases, config) = traced(USERNS);
    let (d, early_agent) = early(&bins, "ownother", &config).await;
    let leased = leases_of(&d.bundle.id);
    assert_eq!(
        leased.len(),
        1,
        "{leased:?}: {} {:?}\n{}",
        lease_file(),
        std::fs::read_dir(format!("{DIRECT_BASE}/state-{}/userns", std::process::id()))
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>()),
        d.diagnostics()
    );
    let mut spec: Value =
        serde_json::from_str(&std::fs::read_to_string(d.bundle.path.join("config.json")).unwrap())
            .unwrap();
    spec["hostname"] = json!("changed");
    d.bundle.write_config(&spec).unwrap();
    d.create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    assert!(
        gone_within(early_agent, SETTLE),
        "the early agent still runs:\n{}",
        d.diagnostics()
    );
    let agents = agents_of(d.shim.pid);
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert!(!took_head(&phases, &d.bundle.id));
    assert_eq!(
        leases_of(&d.bundle.id),
        vec![(agents[0] as u64, leased[0].1)],
        "the same ids, owned by the Create's agent"
    );
    end(d).await;
}

/// Shutdown before any Create: the early agent is killed and its ids are freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_shut_down_before_any_create_frees_the_early_agent_and_ids() {
    let _serial = SERIAL.lock().await;
    let Some(bins) = setup("a_shim_shut_down_before_any_create_frees") else {
        return;
    };
    let (d, agent) = early(&bins, "ownnone", USERNS).await;
    assert_eq!(leases_of(&d.bundle.id).len(), 1);
    shut_down_clean(d).await;
    assert!(gone_within(agent, SETTLE), "the early agent still runs");
}

/// A hostPID pod (not in the template, no user namespace) gets its own agent ahead too,
/// which stays in the host's pid namespace and is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_pid_pods_agent_is_launched_ahead_and_taken() {
    let _serial = SERIAL.lock().await;
    let Some(bins) = setup("a_host_pid_pods_agent_is_launched_ahead") else {
        return;
    };
    let bundle = Bundle::new(&unique_id("ownpid")).unwrap();
    let mut spec = bundle.spec(rund_tests::shim::busybox_rootfs(), &["sleep", "30"]);
    let kept: Vec<Value> = spec["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["type"] != "pid")
        .cloned()
        .collect();
    spec["linux"]["namespaces"] = json!(kept);
    bundle.write_config(&spec).unwrap();
    let (phases, config) = traced("");
    let d = Direct::start_forked(&bins, bundle, &config).await.unwrap();
    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    assert!(took_head(&phases, &d.bundle.id), "{}", d.diagnostics());
    d.start_process("").await.unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/ns/pid", created.pid)).unwrap(),
        std::fs::read_link("/proc/self/ns/pid").unwrap(),
        "hostPID"
    );
    assert!(
        leases_of(&d.bundle.id).is_empty(),
        "no user namespace, no ids"
    );
    end(d).await;
}

/// Agents whose parent is no shim: a launch its server left behind when it exited.
fn orphan_agents() -> std::collections::BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            ppid_and_comm(pid).is_some_and(|(parent, comm)| {
                comm == "rund-agent"
                    && !ppid_and_comm(parent).is_some_and(|(_, c)| c.starts_with("containerd-shim"))
            })
        })
        .collect()
}

/// A `start` whose server fails before it serves (containerd's events endpoint is not there)
/// had already begun launching the pod's own agent, ids leased: the failed `start` leaves
/// neither the agent nor the lease.
#[test]
fn a_start_whose_server_fails_leaves_no_agent_and_no_lease() {
    let _serial = SERIAL.blocking_lock();
    let Some(bins) = setup("a_start_whose_server_fails_leaves_no_agent") else {
        return;
    };
    let config = process_config_with(USERNS).unwrap();
    let env = [
        ("TTRPC_ADDRESS", "/nonexistent/containerd.sock.ttrpc"),
        ("RUND_CONFIG", config.to_str().unwrap()),
    ];
    // Several tries: the server's failure races its launch thread.
    for _ in 0..5 {
        let bundle = Bundle::new(&unique_id("ownfail")).unwrap();
        let spec = bundle.spec(rund_tests::shim::busybox_rootfs(), &["true"]);
        bundle.write_config(&spec).unwrap();
        let before = orphan_agents();
        let out = run_action_env(&bins, &bundle, "start", &env).unwrap();
        assert!(!out.status.success(), "{}", out.stderr);
        assert!(
            out.stderr.contains("/nonexistent/containerd.sock.ttrpc"),
            "{}",
            out.stderr
        );
        assert_eq!(
            leases_of(&bundle.id),
            Vec::new(),
            "ids leased ahead are freed"
        );
        let left: Vec<u32> = orphan_agents().difference(&before).copied().collect();
        assert!(left.is_empty(), "agents left behind: {left:?}");
    }
}
