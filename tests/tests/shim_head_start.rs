//! The head start (`[sandbox] head_start`, per-pod mode) through real containerd: a new pod
//! shim launches its pod's agent as it starts, before containerd's Create arrives, and the pod
//! claims it. `start` reads the pod's spec: an agent for a pod that wants a network namespace
//! of its own makes it at launch, one for a pod that joins one joins it at the claim. A pod
//! that would not fit the warm template (a user namespace) gets an agent of its own launched
//! ahead, which its Create takes; `head_start = false` turns it off, and a pod whose Create
//! fails leaves no agent behind.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use rund_tests::pernode::*;
use rund_tests::{assert_no_leaks_within, Containerd, ContainerdOpts, LeakSnapshot};

const LAUNCHED: &str = "head start: launching the pod's agent";
const OWN_NET: &str = "head start: launching the pod's agent, in a network namespace of its own";
const NODE_NET: &str = "head start: launching the pod's agent, in the node's network namespace";
const OWN: &str = "head start: launching the pod's agent, as its Create would";
const TOOK: &str = "took the agent launched ahead";

fn start(test: &str, config: &str) -> Option<Containerd> {
    let opts = ContainerdOpts {
        // A config file, so the helpers' `--runtime-config-path` has one to name.
        rund_config: Some(format!("# per-pod mode\n{config}")),
        ..ContainerdOpts::new()
    };
    Containerd::start_rund_or_skip(test, opts)
}

/// A phase records file for the shim's config (`[trace] phases_file`).
fn phases_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[trace]\nphases_file = {:?}\n",
        dir.path().join("phases.jsonl")
    );
    (dir, text)
}

/// Whether the Create of `id` recorded a `warm_claim` (the claim's time).
fn recorded_warm_claim(dir: &tempfile::TempDir, id: &str) -> bool {
    let text = std::fs::read_to_string(dir.path().join("phases.jsonl")).unwrap();
    let record = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("no phase record for {id}: {text}"));
    record["extra"]["warm_claim"].is_number()
}

fn log(ctd: &Containerd) -> String {
    std::fs::read_to_string(&ctd.log).unwrap_or_default()
}

fn claimed(ctd: &Containerd, id: &str) -> bool {
    claimed_warm(&log(ctd), id)
}

/// The pod claims the agent its shim launched ahead, which then serves it in a network
/// namespace of its own (only `lo`); the shim keeps no other agent.
#[test]
fn a_pods_agent_is_launched_ahead_and_claimed() {
    let (phases, trace) = phases_file();
    let Some(ctd) = start("a_pods_agent_is_launched_ahead_and_claimed", &trace) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "hs1", &rootfs);
    let shim = shim_of(task_pid(&ctd, "hs1")).unwrap();
    assert!(
        claimed(&ctd, "hs1"),
        "hs1 claimed its head start:\n{}",
        log(&ctd)
    );
    assert!(recorded_warm_claim(&phases, "hs1"));
    assert_eq!(
        children_named(shim, "rund-agent").len(),
        1,
        "the claimed agent only"
    );

    let out = ctd
        .run_spec(&spec(
            &ctd,
            "hs2",
            &rootfs,
            &["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"],
        ))
        .unwrap();
    assert_eq!((out.code(), out.stdout.trim()), (0, "lo"), "{out:?}");
    assert!(claimed(&ctd, "hs2"), "{}", log(&ctd));
    assert_eq!(log(&ctd).matches(LAUNCHED).count(), 2, "{}", log(&ctd));
    assert_eq!(log(&ctd).matches(OWN_NET).count(), 2, "{}", log(&ctd));

    remove(&ctd, "hs1");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

fn net_ns(pid: u32) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap()
}

/// A pod that joins a network namespace (here another pod's, as a CRI pod joins the one CNI
/// set up) gets an agent launched in the node's network namespace, which joins the pod's at the
/// claim; each pod of its own gets a namespace made at launch, not the node's.
#[test]
fn a_pod_that_joins_a_network_namespace_claims_an_agent_without_one() {
    let Some(ctd) = start(
        "a_pod_that_joins_a_network_namespace_claims_an_agent_without_one",
        "",
    ) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "hn1", &rootfs);
    let owner = task_pid(&ctd, "hn1");
    assert_ne!(
        net_ns(owner),
        net_ns(std::process::id()),
        "hn1's own namespace"
    );
    assert!(log(&ctd).contains(OWN_NET), "{}", log(&ctd));

    let mut joiner = spec(&ctd, "hn2", &rootfs, &["sleep", "100000"]);
    joiner.detach = true;
    joiner.flags.extend([
        "--with-ns".to_string(),
        format!("network:/proc/{owner}/ns/net"),
    ]);
    let out = ctd.run_spec(&joiner).unwrap();
    assert!(out.success(), "{out:?}");
    assert!(claimed(&ctd, "hn2"), "{}", log(&ctd));
    assert_eq!(log(&ctd).matches(NODE_NET).count(), 1, "{}", log(&ctd));
    let joined = task_pid(&ctd, "hn2");
    assert_eq!(net_ns(joined), net_ns(owner), "hn2 is in hn1's namespace");
    let agent = children_named(shim_of(joined).unwrap(), "rund-agent");
    assert_eq!(agent.len(), 1, "{agent:?}");
    assert_eq!(net_ns(agent[0]), net_ns(owner), "and so is its agent");

    remove(&ctd, "hn2");
    remove(&ctd, "hn1");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A pod rund remaps does not fit the warm template: its shim launches the pod's own agent
/// ahead, in the pod's user namespace, and the Create takes it (no warm claim).
#[test]
fn a_userns_pod_gets_an_agent_of_its_own_ahead() {
    let Some(ctd) = start(
        "a_userns_pod_gets_an_agent_of_its_own_ahead",
        "[userns]\nmode = \"always\"\n",
    ) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let out = ctd
        .run_spec(&spec(&ctd, "hu", &rootfs, &["cat", "/proc/self/uid_map"]))
        .unwrap();
    assert_eq!(out.code(), 0, "{out:?}");
    let map: Vec<&str> = out.stdout.split_whitespace().collect();
    assert!(map.len() == 3 && map[1] != "0", "remapped: {out:?}");
    let text = log(&ctd);
    assert!(text.contains(OWN) && !text.contains(OWN_NET), "{text}");
    assert!(text.contains(TOOK) && !claimed(&ctd, "hu"), "{text}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `head_start = false`: the pod starts cold.
#[test]
fn head_start_false_launches_none() {
    let (phases, trace) = phases_file();
    let Some(ctd) = start(
        "head_start_false_launches_none",
        &format!("[sandbox]\nhead_start = false\n{trace}"),
    ) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let out = ctd.run_spec(&spec(&ctd, "hf", &rootfs, &["true"])).unwrap();
    assert_eq!(out.code(), 0, "{out:?}");
    let text = log(&ctd);
    assert!(!text.contains(LAUNCHED) && !claimed(&ctd, "hf"), "{text}");
    assert!(!recorded_warm_claim(&phases, "hf"));
}

/// A Create refused before the sandbox starts (an AppArmor profile, which rund does not
/// support): the agent launched ahead goes with the shim, and nothing is left.
#[test]
fn a_failed_create_leaves_no_head_start_agent() {
    let Some(ctd) = start("a_failed_create_leaves_no_head_start_agent", "") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let mut bad = spec(&ctd, "ha", &rootfs, &["true"]);
    bad.flags
        .extend(["--apparmor-profile".to_string(), "rund-test".to_string()]);
    let out = ctd.run_spec(&bad).unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr.contains("process.apparmorProfile"),
        "the refusal names the field: {out:?}"
    );
    assert!(log(&ctd).contains(LAUNCHED), "{}", log(&ctd));
    let _ = ctd.ctr(&["container", "rm", "ha"]);
    assert_no_leaks_within(&ctd, &before, GRACE);
}
