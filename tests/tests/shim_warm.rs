//! Warm sandboxes (`[sandbox] warm = N`, per-node mode) through real containerd: the node's shim
//! keeps N agents launched ahead of any pod; a pod without a user namespace claims one, which
//! then serves it in the pod's own network namespace (CNI's, through CRI, or a new one), with
//! its hostname and sysctls; the pool refills; warm agents go with the node, whether it leaves
//! or is killed; a user-namespaced pod starts cold.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rund_tests::cri::{CriFixture, Handler};
use rund_tests::pernode::*;
use rund_tests::shim::memory::mapped_kb;
use rund_tests::{
    assert_no_leaks_within, ContainerSpec, Containerd, ContainerdOpts, LeakSnapshot, BUSYBOX_IMAGE,
};

const WARM: &str = "[sandbox]\nwarm = 2\n";

fn start(test: &str, more: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, per_node_with(ContainerdOpts::new(), more))
}

/// The node's agent processes (claimed and warm), once there are `want`, within [`GRACE`].
fn agents_reach(node: u32, want: usize) -> Vec<u32> {
    let deadline = Instant::now() + GRACE;
    loop {
        let agents = agents_of(node);
        if agents.len() == want || Instant::now() >= deadline {
            return agents;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node's warm agents: its agents less the one serving the pod of `task`.
fn warm_beside(agents: Vec<u32>, task: u32) -> (u32, Vec<u32>) {
    let own = ppid_and_comm(task).map(|(pp, _)| pp).unwrap();
    (own, agents.into_iter().filter(|&a| a != own).collect())
}

fn claimed(ctd: &Containerd, id: &str) -> bool {
    claimed_warm(&node_log(ctd), id)
}

/// A pod claims a warm agent (it runs in a network namespace of its own, made at the claim:
/// only `lo` is there), the pool refills to two, and the warm agents go when the node leaves.
#[test]
fn a_pod_claims_a_warm_agent_and_the_pool_refills() {
    let Some(ctd) = start("a_pod_claims_a_warm_agent_and_the_pool_refills", WARM) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "w1", &rootfs);
    let node = shim_of(task_pid(&ctd, "w1")).unwrap();
    let agents = agents_reach(node, 3);
    assert_eq!(agents.len(), 3, "w1's agent and two warm ones: {agents:?}");

    let out = ctd
        .run_spec(&spec(
            &ctd,
            "w2",
            &rootfs,
            &["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"],
        ))
        .unwrap();
    assert_eq!((out.code(), out.stdout.trim()), (0, "lo"), "{out:?}");
    assert!(
        claimed(&ctd, "w2"),
        "w2 claimed a warm agent:\n{}",
        node_log(&ctd)
    );
    let refilled = agents_reach(node, 3);
    assert_eq!(refilled.len(), 3, "the pool refilled: {refilled:?}");

    remove(&ctd, "w1");
    assert!(gone_within(node, GRACE), "the node left with its last pod");
    for pid in refilled {
        assert!(
            gone_within(pid, GRACE),
            "warm agent {pid} went with the node"
        );
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A warm agent that waits gives back its start-up pages (after 8 idle delays: 2 s here),
/// where it used to keep them until claimed, and still serves the pod that claims it.
#[test]
fn a_waiting_warm_agent_gives_back_its_start_up_pages() {
    let config = format!("{WARM}[idle]\ntrim_after_ms = 250\n");
    let Some(ctd) = start(
        "a_waiting_warm_agent_gives_back_its_start_up_pages",
        &config,
    ) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "wt", &rootfs);
    let task = task_pid(&ctd, "wt");
    let node = shim_of(task).unwrap();
    let agents = agents_reach(node, 3);
    let (own, warm) = warm_beside(agents, task);
    assert_eq!(warm.len(), 2, "two warm agents beside wt's ({own})");
    let fresh: Vec<u64> = warm.iter().map(|&p| mapped_kb(p)).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut now = fresh.clone();
    while Instant::now() < deadline && now.iter().zip(&fresh).any(|(n, f)| n * 2 > *f) {
        std::thread::sleep(Duration::from_millis(200));
        now = warm.iter().map(|&p| mapped_kb(p)).collect();
    }
    eprintln!("warm agents {warm:?}: mapped {fresh:?} kB when found, {now:?} kB after waiting");
    assert!(
        fresh.iter().all(|&f| f >= 256),
        "a fresh warm agent maps its start-up text: {fresh:?} kB"
    );
    assert!(
        now.iter().zip(&fresh).all(|(n, f)| n * 2 <= *f),
        "waiting warm agents kept their start-up pages: {fresh:?} -> {now:?} kB"
    );
    let out = ctd
        .run_spec(&spec(&ctd, "wt2", &rootfs, &["echo", "warm"]))
        .unwrap();
    assert_eq!((out.code(), out.stdout.as_str()), (0, "warm\n"), "{out:?}");
    let log = node_log(&ctd);
    let pid = claimed_warm_pid(&log, "wt2").expect("wt2 claimed a warm agent");
    assert!(
        warm.contains(&pid),
        "wt2 claimed a trimmed one ({pid}, not {warm:?}):\n{log}"
    );
    remove(&ctd, "wt");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Warm agents killed while they wait are reaped, never claimed: the next pod starts cold and
/// runs, and the pool refills with live ones.
#[test]
fn dead_warm_agents_are_skipped_and_replaced() {
    let Some(ctd) = start("dead_warm_agents_are_skipped_and_replaced", WARM) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "wd", &rootfs);
    let task = task_pid(&ctd, "wd");
    let node = shim_of(task).unwrap();
    let agents = agents_reach(node, 3);
    assert_eq!(agents.len(), 3, "{agents:?}");
    // A third agent is a child before it is in the pool; killed then, the refill still running
    // would replace it at once and the claim below would find a live one. wd itself may have
    // claimed one of the first two (the pool fills beside the node's first admission), and
    // then the pool is full after three launches.
    let launches = if claimed(&ctd, "wd") { 3 } else { 2 };
    let deadline = Instant::now() + GRACE;
    while warm_launched(&node_log(&ctd)) < launches && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        warm_launched(&node_log(&ctd)),
        launches,
        "{}",
        node_log(&ctd)
    );
    std::thread::sleep(Duration::from_millis(50));
    let (own, warm) = warm_beside(agents, task);
    assert_eq!(warm.len(), 2, "two warm agents beside wd's ({own})");
    for &pid in &warm {
        kill9(pid);
    }
    let out = ctd
        .run_spec(&spec(&ctd, "wd2", &rootfs, &["echo", "cold"]))
        .unwrap();
    assert_eq!((out.code(), out.stdout.as_str()), (0, "cold\n"), "{out:?}");
    let log = node_log(&ctd);
    // The refill loop ends a few microseconds after its last launch; a kill that beat it is
    // replaced before the claim. Either way no dead agent may serve the pod.
    if let Some(pid) = claimed_warm_pid(&log, "wd2") {
        assert!(!warm.contains(&pid), "claimed dead agent {pid}:\n{log}");
        eprintln!("note: the refill replaced the killed agents before wd2's claim");
    }
    let refilled = agents_reach(node, 3);
    assert_eq!(refilled.len(), 3, "{refilled:?}");
    assert!(
        refilled.iter().all(|p| !warm.contains(p)),
        "the dead ones were reaped and replaced: {refilled:?} (killed {warm:?})"
    );
    remove(&ctd, "wd");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Killed, the node's shim takes its warm agents with it (each sees its connection close,
/// as nothing keeps them); the pod's own agent runs on under the keeper's next node shim,
/// which launches warm agents anew.
#[test]
fn warm_agents_go_with_a_killed_node() {
    let Some(ctd) = start("warm_agents_go_with_a_killed_node", WARM) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "wk", &rootfs);
    let task = task_pid(&ctd, "wk");
    let node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    let agents = agents_reach(node, 3);
    assert_eq!(agents.len(), 3, "{agents:?}");
    let own = ppid_and_comm(task).map(|(pp, _)| pp).unwrap();
    kill9(node);
    for &pid in agents.iter().filter(|&&a| a != own) {
        assert!(
            gone_within(pid, GRACE),
            "warm agent outlived its node: {}",
            describe(pid)
        );
    }
    assert!(alive(own), "the pod's agent runs on");
    assert_eq!(task_pid(&ctd, "wk"), task);
    let new = new_node(keeper, node).expect("a new node shim");
    let warm = agents_reach(new, 2);
    assert_eq!(warm.len(), 2, "the new node shim's warm agents: {warm:?}");
    remove(&ctd, "wk");
    assert!(
        gone_within(keeper, GRACE),
        "the node left with its last pod"
    );
    assert_node_files_gone(&ctd);
    for pid in warm {
        assert!(
            gone_within(pid, GRACE),
            "warm agent {pid} went with the node"
        );
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A user-namespaced pod cannot use a warm agent (one inside a user namespace could not join
/// a host-owned network namespace): it starts cold and runs, and the warm agents stay.
#[test]
fn a_userns_pod_starts_cold() {
    let more = format!("{WARM}[userns]\nmode = \"always\"\n");
    let Some(ctd) = start("a_userns_pod_starts_cold", &more) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "wu", &rootfs);
    let node = shim_of(task_pid(&ctd, "wu")).unwrap();
    assert_eq!(agents_reach(node, 3).len(), 3);
    let out = ctd
        .run_spec(&spec(&ctd, "wu2", &rootfs, &["cat", "/proc/self/uid_map"]))
        .unwrap();
    assert_eq!(out.code(), 0, "{out:?}");
    let map: Vec<&str> = out.stdout.split_whitespace().collect();
    assert!(map.len() == 3 && map[1] != "0", "remapped: {out:?}");
    assert!(
        !claimed(&ctd, "wu") && !claimed(&ctd, "wu2"),
        "{}",
        node_log(&ctd)
    );
    assert_eq!(agents_reach(node, 3).len(), 3, "the warm agents stayed");
    remove(&ctd, "wu");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `warm = 0`: the node launches no agent ahead of a pod.
#[test]
fn warm_zero_launches_none() {
    let Some(ctd) = start("warm_zero_launches_none", "[sandbox]\nwarm = 0\n") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    run_detached(&ctd, "wz", &rootfs);
    let node = shim_of(task_pid(&ctd, "wz")).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(children_named(node, "rund-agent").len(), 1);
    remove(&ctd, "wz");
    // The node leaves with its last pod, and takes its files: a node shim
    // killed with containerd would leave them in /run/containerd/s.
    assert!(
        gone_within(keeper, GRACE),
        "the node left with its last pod"
    );
    assert_node_files_gone(&ctd);
}

/// The Kubernetes path: a CRI pod on a CNI network claims a warm agent, which joins the pod's
/// network namespace (the pod IP is on the container's interface) and takes the pod's hostname
/// and sysctls.
#[test]
fn a_cri_pod_claims_a_warm_agent_in_its_network() {
    let opts = per_node_with(ContainerdOpts::new().pod_network(), WARM);
    let Some(mut fx) = CriFixture::start(
        Handler::Rund,
        "a_cri_pod_claims_a_warm_agent_in_its_network",
        opts,
    ) else {
        return;
    };
    let sleeper = ContainerSpec::new("work", BUSYBOX_IMAGE, &["sleep", "100000"]);
    let mut first = fx.pod_spec("warm-first");
    first.host_network = false;
    let first_id = fx.run_pod(&first).expect("RunPodSandbox");
    let c1 = fx.run(&first_id, &sleeper, &first).expect("container");
    let shims = rund_tests::leaks::shim_processes(&fx.ctd);
    assert_eq!(shims.len(), 1, "the node's shim: {shims:#?}");
    let node = shims[0].pid;
    assert_eq!(agents_reach(node, 3).len(), 3, "one pod, two warm");

    let mut pod = fx.pod_spec("warm-pod");
    pod.host_network = false;
    pod.sysctls = HashMap::from([
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
        (
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "99".to_string(),
        ),
    ]);
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    assert!(claimed(&fx.ctd, &pod_id), "{}", node_log(&fx.ctd));
    let c = fx.run(&pod_id, &sleeper, &pod).expect("container");
    let ip = fx.pod_ip(&pod_id);
    assert!(!ip.is_empty(), "the pod has an IP");
    let out = fx.sh_ok(
        &c,
        "hostname; cat /proc/sys/kernel/shm_rmid_forced /proc/sys/net/ipv4/ip_unprivileged_port_start; ip -o -4 addr",
    );
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("warm-pod"), "{out}");
    assert_eq!(lines.next(), Some("1"), "{out}");
    assert_eq!(lines.next(), Some("99"), "{out}");
    assert!(out.contains(&format!("inet {ip}/")), "the pod IP: {out}");
    // The first pod is still served beside it.
    assert_eq!(fx.sh_ok(&c1, "echo ok"), "ok\n");
    fx.finish();
}
