//! The Kubernetes path through containerd's CRI with runtime handler `rund`.
//! Skipped until rund is built (`RUND_REQUIRE_BINS=1` makes that a failure);
//! `RUND_IT_RUNTIME=io.containerd.runc.v2` runs it against runc to validate the test itself.

use std::time::{Duration, Instant};

use rund_tests::cri::api::ContainerState;
use rund_tests::leaks::shim_processes;
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, ContainerSpec, Containerd, ContainerdOpts,
    LeakSnapshot, PodSpec, BUSYBOX_IMAGE, RUNC_RUNTIME,
};

fn handler() -> &'static str {
    if runtime_under_test() == RUNC_RUNTIME {
        "runc"
    } else {
        "rund"
    }
}

/// Shim processes of this instance (the binary name is in argv[0]).
fn shims(ctd: &Containerd) -> Vec<String> {
    shim_processes(ctd)
        .into_iter()
        .map(|p| format!("{} {}", p.pid, p.cmdline))
        .collect()
}

#[test]
fn cri_pod_lifecycle() {
    let Some(ctd) = Containerd::start_under_test("cri_pod_lifecycle", ContainerdOpts::new().cri())
    else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);

    let pod = PodSpec::new("lifecycle", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, handler()).expect("RunPodSandbox");
    let web = ContainerSpec::new(
        "web",
        BUSYBOX_IMAGE,
        &["sh", "-c", "echo up > /tmp/s; sleep 1000 & wait"],
    );
    // Ignores TERM: StopContainer must end it with KILL after the timeout.
    let stubborn = ContainerSpec::new(
        "stubborn",
        BUSYBOX_IMAGE,
        &["sh", "-c", "trap '' TERM; while :; do sleep 1; done"],
    );
    let a = cri.create_and_start(&pod_id, &web, &pod).expect("web");
    let b = cri
        .create_and_start(&pod_id, &stubborn, &pod)
        .expect("stubborn");

    let r = cri
        .exec_sync(&a, &["sh", "-c", "cat /tmp/s; echo err >&2; exit 5"], 10)
        .unwrap();
    assert_eq!(r.stdout, b"up\n", "{r:?}");
    assert_eq!(r.stderr, b"err\n", "{r:?}");
    assert_eq!(r.exit_code, 5);

    let stats = cri.container_stats(&a).expect("ContainerStats");
    let mem = stats
        .memory
        .and_then(|m| m.working_set_bytes)
        .map(|v| v.value)
        .unwrap_or(0);
    assert!(mem > 0, "memory working set must be real");
    assert!(stats.cpu.is_some(), "cpu stats missing");

    let s = shims(&ctd);
    assert_eq!(s.len(), 1, "exactly one shim must serve the pod: {s:#?}");

    let t0 = Instant::now();
    cri.stop_container(&b, 2).expect("StopContainer");
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "KILL came before the timeout"
    );
    let st = cri.container_status(&b).unwrap();
    assert_eq!(st.state, ContainerState::ContainerExited as i32);
    assert_eq!(st.exit_code, 137, "must end by SIGKILL: {st:?}");

    cri.stop_container(&a, 2).expect("StopContainer web");
    for id in [&a, &b] {
        cri.remove_container(id).expect("RemoveContainer");
    }
    cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&pod_id).expect("RemovePodSandbox");
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

/// The pod's sandbox (rund's agent) dies: creating a container in that pod
/// fails clearly, and the pod can still be removed without leaks.
#[test]
fn pod_whose_sandbox_died() {
    if runtime_under_test() == RUNC_RUNTIME {
        rund_tests::skip!("rund-specific (the agent is the sandbox)");
    }
    let Some(ctd) =
        Containerd::start_under_test("pod_whose_sandbox_died", ContainerdOpts::new().cri())
    else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let pod = PodSpec::new("dead", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, handler()).expect("RunPodSandbox");
    // The agent is the shim's child; this test started both (via containerd).
    let shim = shims(&ctd);
    assert_eq!(shim.len(), 1, "{shim:?}");
    let shim_pid = shim[0].split_whitespace().next().unwrap().to_string();
    let children: Vec<i64> = std::fs::read_dir(format!("/proc/{shim_pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i64>>()
        })
        .collect();
    let sandbox_pid = *children
        .iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.contains("rund-agent"))
        })
        .expect("the pod's rund-agent");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sandbox_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let web = ContainerSpec::new("web", BUSYBOX_IMAGE, &["sleep", "1000"]);
    let err = cri
        .create_and_start(&pod_id, &web, &pod)
        .expect_err("pod is dead");
    let text = format!("{err:?}");
    // containerd 2.x saw the sandbox's TaskExit and refuses StartContainer itself; 1.6 asks the
    // shim, which answers.
    let by_containerd = ctd.is_v2() && text.contains(&format!("{pod_id}\\\" is not running"));
    assert!(
        text.contains("has exited") || text.contains("no running task") || by_containerd,
        "clear error expected: {text}"
    );
    cri.remove_pod(&pod_id);
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
