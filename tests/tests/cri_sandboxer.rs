//! containerd 2.x's sandbox API served by rund (`sandboxer = "shim"`): the pod sandbox is rund's
//! agent itself, with no pause container. Runs against containerd 2.1 from the cache whatever
//! line `RUND_IT_CONTAINERD` selects (1.6 has no sandbox API).
//!
//! - no pause container and no pause image (the configured one cannot be pulled);
//! - a pod network pod: RunPodSandbox READY with an IP, two containers sharing the pod's network
//!   and IPC namespaces and its hostname, ExecSync in each, StopPodSandbox ends both (exit
//!   reported), RemovePodSandbox leaves nothing;
//! - StopContainer's grace: a container that catches TERM exits with its own status at once, one
//!   that ignores TERM is killed (137) once the timeout has passed;
//! - `shareProcessNamespace`: the containers see each other's processes;
//! - bad input: an unknown sandbox annotation value fails RunPodSandbox cleanly;
//! - a container's task events reach containerd 2.1 in order: create, start, exit (with its
//!   status), delete.
//!
//! `cri_sandboxer_api.rs` drives the rest of the Sandbox service through containerd's
//! sandbox Controller API (StopSandbox's grace, Status, Platform, Metrics, Ping).
//!
//! Every pod here has its own network: containerd 2.1 itself panics on a host-network pod with
//! `sandboxer = "shim"` (a nil spec in NewBundle, fixed upstream in 2.3 by b32cecd3).

use rund_tests::containerd::K8S_NAMESPACE;
use rund_tests::cri::sandboxer::start_shim_mode;
use rund_tests::cri::CriFixture;
use rund_tests::{ContainerSpec, BUSYBOX_IMAGE};

const SLEEPER: &[&str] = &["sleep", "100000"];

fn start(test: &str) -> Option<CriFixture> {
    start_shim_mode(test, None)
}

/// With the shim as sandboxer containerd keeps no container (and no task) for the sandbox: the
/// containers in its k8s.io namespace are exactly the pod's.
fn only_the_pods_containers(fx: &CriFixture, ids: &[&String]) {
    let out = fx
        .ctd
        .ctr_in("k8s.io", &["containers", "list", "-q"])
        .expect("ctr containers list");
    let mut listed: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    listed.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(|s| s.as_str()).collect();
    want.sort_unstable();
    assert_eq!(listed, want, "no pause container:\n{}", fx.ctd.log_tail(30));
}

#[test]
fn pod_network_pod_with_two_containers() {
    let Some(mut fx) = start("pod_network_pod_with_two_containers") else {
        return;
    };
    let mut pod = fx.pod_spec("sbx");
    pod.host_network = false;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let status = fx.cri.pod_sandbox_status(&pod_id).expect("status");
    assert_eq!(status.state, 0, "SANDBOX_READY: {status:?}");
    let ip = fx.pod_ip(&pod_id);
    assert!(!ip.is_empty(), "the pod has an IP: {status:?}");
    let a = fx
        .run(
            &pod_id,
            &ContainerSpec::new("a", BUSYBOX_IMAGE, SLEEPER),
            &pod,
        )
        .expect("container a");
    let b = fx
        .run(
            &pod_id,
            &ContainerSpec::new("b", BUSYBOX_IMAGE, SLEEPER),
            &pod,
        )
        .expect("container b");
    for id in [&a, &b] {
        let addrs = fx.sh_ok(id, "ip -4 -o addr show");
        assert!(addrs.contains(&ip), "{id} has the pod IP {ip}: {addrs}");
        assert_eq!(fx.sh_ok(id, "hostname").trim(), "sbx");
    }
    // One network, IPC and UTS namespace for both; their own mount namespaces.
    let ns = |id: &str, kind: &str| fx.sh_ok(id, &format!("readlink /proc/self/ns/{kind}"));
    for kind in ["net", "ipc", "uts"] {
        assert_eq!(ns(&a, kind), ns(&b, kind), "{kind} is shared");
    }
    assert_ne!(ns(&a, "mnt"), ns(&b, "mnt"));
    // A server in one container is reachable from the other over loopback.
    fx.sh_ok(&a, "nc -l -p 7777 -e echo pong >/dev/null 2>&1 &");
    let r = fx.wait_until(&b, "echo ping | nc 127.0.0.1 7777 | grep pong");
    assert_eq!(r.code, 0, "loopback between containers: {r:?}");
    only_the_pods_containers(&fx, &[&a, &b]);

    fx.cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    for id in [&a, &b] {
        let st = fx.cri.container_status(id).expect("ContainerStatus");
        assert_eq!(st.state, 2, "{id} is EXITED after StopPodSandbox: {st:?}");
        assert_eq!(st.exit_code, 137, "{id} was killed: {st:?}");
    }
    let st = fx.cri.pod_sandbox_status(&pod_id).expect("status");
    assert_eq!(st.state, 1, "SANDBOX_NOTREADY: {st:?}");
    fx.finish();
}

#[test]
fn shared_pid_namespace_pod() {
    let Some(mut fx) = start("shared_pid_namespace_pod") else {
        return;
    };
    let mut pod = fx.pod_spec("sbxpid");
    pod.host_network = false;
    pod.share_process_namespace = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let a = fx
        .run(
            &pod_id,
            &ContainerSpec::new("a", BUSYBOX_IMAGE, &["sleep", "300001"]),
            &pod,
        )
        .expect("a");
    let b = fx
        .run(
            &pod_id,
            &ContainerSpec::new("b", BUSYBOX_IMAGE, &["sleep", "300002"]),
            &pod,
        )
        .expect("b");
    let ps = fx.sh_ok(&b, "ps -o args");
    assert!(ps.contains("sleep 300001"), "b sees a: {ps}");
    let ps = fx.sh_ok(&a, "ps -o args");
    assert!(ps.contains("sleep 300002"), "a sees b: {ps}");
    fx.finish();
}

#[test]
fn a_bad_pod_annotation_fails_run_pod_sandbox_cleanly() {
    let Some(mut fx) = start("a_bad_pod_annotation_fails_run_pod_sandbox_cleanly") else {
        return;
    };
    let mut pod = fx.pod_spec("sbxbad");
    pod.host_network = false;
    pod.annotations
        .insert("rund.io/userns".into(), "sideways".into());
    let err = fx.run_pod(&pod).expect_err("a bad rund.io/userns value");
    assert!(
        err.to_string().contains("rund.io/userns"),
        "the error names the annotation: {err}"
    );
    // A good pod still runs afterwards.
    let mut good = fx.pod_spec("sbxgood");
    good.host_network = false;
    let pod_id = fx.run_pod(&good).expect("RunPodSandbox");
    fx.run(
        &pod_id,
        &ContainerSpec::new("a", BUSYBOX_IMAGE, SLEEPER),
        &good,
    )
    .expect("container");
    fx.finish();
}

#[test]
fn stop_container_grace_is_enforced() {
    let Some(mut fx) = start("stop_container_grace_is_enforced") else {
        return;
    };
    let mut pod = fx.pod_spec("sbxgrace");
    pod.host_network = false;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let catcher = ContainerSpec::new(
        "catcher",
        BUSYBOX_IMAGE,
        &[
            "sh",
            "-c",
            "trap 'exit 7' TERM; touch /tmp/ready; while :; do sleep 1; done",
        ],
    );
    let ignorer = ContainerSpec::new(
        "ignorer",
        BUSYBOX_IMAGE,
        &[
            "sh",
            "-c",
            "trap '' TERM; touch /tmp/ready; while :; do sleep 1; done",
        ],
    );
    let c = fx.run(&pod_id, &catcher, &pod).expect("catcher");
    let i = fx.run(&pod_id, &ignorer, &pod).expect("ignorer");
    for id in [&c, &i] {
        let r = fx.wait_until(id, "test -e /tmp/ready");
        assert_eq!(r.code, 0, "{id} installed its trap: {r:?}");
    }
    fx.cri
        .stop_container(&c, 30)
        .expect("StopContainer catcher");
    let st = fx.cri.container_status(&c).expect("status");
    assert_eq!((st.state, st.exit_code), (2, 7), "TERM was caught: {st:?}");

    const GRACE: i64 = 2;
    let t0 = std::time::Instant::now();
    fx.cri
        .stop_container(&i, GRACE)
        .expect("StopContainer ignorer");
    let took = t0.elapsed();
    let st = fx.cri.container_status(&i).expect("status");
    assert_eq!(
        (st.state, st.exit_code),
        (2, 137),
        "KILL after the grace: {st:?}"
    );
    assert!(
        took >= std::time::Duration::from_secs(GRACE as u64),
        "the grace period was honoured before KILL: {took:?}"
    );
    fx.finish();
}

#[test]
fn container_task_events_in_order() {
    let Some(mut fx) = start("container_task_events_in_order") else {
        return;
    };
    let mut pod = fx.pod_spec("sbxev");
    pod.host_network = false;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let events = fx.ctd.watch_events_in(K8S_NAMESPACE).expect("ctr events");
    let wait = std::time::Duration::from_secs(60);
    let id = fx
        .run(
            &pod_id,
            &ContainerSpec::new("ev", BUSYBOX_IMAGE, &["sh", "-c", "exit 3"]),
            &pod,
        )
        .expect("container");
    let exit = events
        .wait_topic(&id, "/tasks/exit", wait)
        .expect("TaskExit");
    assert_eq!(exit.body["exit_status"], 3, "{exit:?}");
    assert!(fx.cri.wait_exited(&id, wait), "CRI saw no exit of {id}");
    fx.cri.remove_container(&id).expect("RemoveContainer");
    let delete = events
        .wait_topic(&id, "/tasks/delete", wait)
        .expect("TaskDelete");
    assert_eq!(delete.body["exit_status"], 3, "{delete:?}");
    let tasks: Vec<String> = events
        .topics_for(&id)
        .into_iter()
        .filter(|t| t.starts_with("/tasks/"))
        .collect();
    assert_eq!(
        tasks,
        [
            "/tasks/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete"
        ],
        "{}",
        fx.ctd.log_tail(30)
    );
    fx.finish();
}
