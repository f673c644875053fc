//! Kubernetes' cgroup layout on pure cgroup v2 (the VM suite): the test makes the pod's cgroup
//! as the kubelet's cgroupfs driver does, then an init container, an app container and a
//! restart of it each sit at their exact cgroupsPath (v2 has no pool and no reuse: a gone
//! container's cgroup is removed), and after RemovePodSandbox the kubelet's rmdir of the pod's
//! cgroup succeeds, with no pool state made for it.

use std::path::Path;
use std::time::Duration;

use rund_tests::cri::api::ContainerState;
use rund_tests::fsview::{cgroup_children, make_cgroup_like_the_kubelet, wait_for};
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, ContainerSpec, Containerd, ContainerdOpts,
    LeakSnapshot, PodSpec, BUSYBOX_IMAGE,
};

const ROOT: &str = "/sys/fs/cgroup";

fn pure_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists() && !Path::new(ROOT).join("memory").is_dir()
}

#[test]
fn kubelet_shaped_pod_sits_at_exact_paths_and_leaves_nothing() {
    let test = "kubelet_shaped_pod_sits_at_exact_paths_and_leaves_nothing";
    if !pure_v2() {
        rund_tests::skip!("{test}: needs pure cgroup v2 (the VM suite runs it)");
    }
    let Some(_bins) = rund_bins_or_skip(test) else {
        return;
    };
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("rund.toml");
    let state = cfg_dir.path().join("pool-state");
    std::fs::write(&cfg, format!("[cgroup]\nstate_dir = {state:?}\n")).unwrap();
    let opts = ContainerdOpts {
        rund_config_path: Some(cfg.clone()),
        ..ContainerdOpts::new().cri()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(test, opts) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let pod_rel = format!("{}/podkubelet", ctd.cgroup_parent.trim_start_matches('/'));
    make_cgroup_like_the_kubelet(Path::new(ROOT), &pod_rel);
    let root = Path::new(ROOT);
    let pod = PodSpec::new("kubelet", &format!("/{pod_rel}"));
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let exited = |id: &str| {
        cri.container_status(id)
            .is_ok_and(|s| s.state == ContainerState::ContainerExited as i32)
    };
    let only = |want: &[&String]| {
        let (mut visible, hidden) = cgroup_children(root, &pod_rel);
        visible.sort();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        (visible, hidden) == (want, vec![])
    };
    let procs_at = |id: &str| {
        std::fs::read_to_string(root.join(&pod_rel).join(id).join("cgroup.procs"))
            .unwrap_or_default()
    };

    let init = ContainerSpec::new("init", BUSYBOX_IMAGE, &["sh", "-c", "exit 0"]);
    let init_id = cri.create_and_start(&pod_id, &init, &pod).expect("init");
    wait_for("init exited", || exited(&init_id));
    cri.remove_container(&init_id)
        .expect("RemoveContainer init");
    wait_for("only the sandbox's cgroup once init is removed", || {
        only(&[&pod_id])
    });
    for round in 0..2 {
        let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
        let app_id = cri.create_and_start(&pod_id, &app, &pod).expect("app");
        // Exactly the sandbox and the app, at their exact names, and the app's processes in
        // its own cgroup.
        assert!(
            only(&[&pod_id, &app_id]),
            "round {round}: {:?}",
            cgroup_children(root, &pod_rel)
        );
        assert!(
            !procs_at(&app_id).trim().is_empty(),
            "round {round}: the app's processes are at its exact path"
        );
        // A restart (CrashLoopBackOff): stop, remove, create again.
        cri.stop_container(&app_id, 1).expect("StopContainer");
        cri.remove_container(&app_id).expect("RemoveContainer");
        wait_for("the app's cgroup removed", || only(&[&pod_id]));
    }
    cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&pod_id).expect("RemovePodSandbox");
    // What the kubelet does next: rmdir the pod's cgroup, which must be empty.
    wait_for("the pod's cgroup empty", || only(&[]));
    std::fs::remove_dir(root.join(&pod_rel))
        .unwrap_or_else(|e| panic!("kubelet rmdir of {pod_rel}: {e}"));
    let states = std::fs::read_dir(&state).map(|d| d.count()).unwrap_or(0);
    assert_eq!(states, 0, "pool state was made for a pod's cgroup");
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
