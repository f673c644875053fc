//! CRI smoke test against Debian's runc: proves the private containerd's CRI path (sandbox
//! image import, host-network pod, two containers, ExecSync, stats, stop, removal) works here.

use std::time::Duration;

use rund_tests::{
    assert_no_leaks_within, ContainerSpec, Containerd, ContainerdOpts, LeakSnapshot, PodSpec,
    BUSYBOX_IMAGE,
};

#[test]
fn cri_pod_with_two_containers_on_runc() {
    let ctd = Containerd::start(ContainerdOpts::new().cri().with_runc()).expect("containerd");
    let cri = ctd.cri_client().expect("CRI client");
    let v = cri.version().unwrap();
    assert_eq!(v.runtime_name, "containerd", "{v:?}");
    let before = LeakSnapshot::take(&ctd);

    let pod = PodSpec::new("smoke", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "runc").expect("RunPodSandbox");
    let sleeper = ContainerSpec::new("sleeper", BUSYBOX_IMAGE, &["sleep", "1000"]);
    let worker = ContainerSpec::new(
        "worker",
        BUSYBOX_IMAGE,
        &["sh", "-c", "echo ready > /tmp/state; sleep 1000 & wait"],
    );
    let a = cri
        .create_and_start(&pod_id, &sleeper, &pod)
        .expect("sleeper");
    let b = cri
        .create_and_start(&pod_id, &worker, &pod)
        .expect("worker");
    assert_eq!(cri.list_containers(Some(&pod_id)).unwrap().len(), 2);
    // The leak checker must see the running pod (so its final "clean" verdict means something).
    let during = before
        .diff(&LeakSnapshot::take(&ctd))
        .expect("pod visible to leak checker");
    assert!(during.contains(&ctd.cgroup_parent), "{during}");
    assert!(during.contains("containerd-shim"), "{during}");

    // ExecSync: output and exit code.
    let r = cri
        .exec_sync(&b, &["sh", "-c", "cat /tmp/state; exit 3"], 10)
        .unwrap();
    assert_eq!(
        (r.stdout.as_slice(), r.exit_code),
        (&b"ready\n"[..], 3),
        "{r:?}"
    );
    // pid namespace CONTAINER: pid 1 is the container's own process, not the sandbox's.
    let r = cri.exec_sync(&a, &["cat", "/proc/1/cmdline"], 10).unwrap();
    assert_eq!(r.stdout, b"sleep\x001000\x00", "{r:?}");

    let stats = cri.container_stats(&a).unwrap();
    let mem = stats
        .memory
        .and_then(|m| m.working_set_bytes)
        .map(|v| v.value);
    assert!(mem.unwrap_or(0) > 0, "memory stats: {mem:?}");

    for id in [&a, &b] {
        cri.stop_container(id, 2).expect("StopContainer");
        let st = cri.container_status(id).unwrap();
        assert_eq!(
            st.state,
            rund_tests::cri::api::ContainerState::ContainerExited as i32
        );
        cri.remove_container(id).expect("RemoveContainer");
    }
    cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&pod_id).expect("RemovePodSandbox");
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
