//! Kubernetes' cgroup layout on pure cgroup v2 (the VM suite): the test makes the pod's cgroup
//! as the kubelet does, with its cgroupfs driver (`<parent>/pod<uid>`) or its systemd driver
//! (`kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice`, for which
//! containerd hands rund `slice:cri-containerd:<id>`). An init container, an app container
//! and a restart of it each sit at their exact (expanded) cgroupsPath with their processes in
//! it (v2 has no pool and no reuse: a gone container's cgroup is removed), and after
//! RemovePodSandbox the kubelet's rmdir of the pod's cgroup succeeds, with no pool state made.

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
    // The cgroupfs driver: the pod's cgroup under the instance's parent, and containerd's
    // cgroupsPath `<pod cgroup>/<id>` as it is.
    pod_at_exact_paths(
        test,
        |ctd| {
            let rel = format!("{}/podkubelet", ctd.cgroup_parent.trim_start_matches('/'));
            (rel.clone(), format!("/{rel}"))
        },
        |id| id.to_string(),
    );
}

#[test]
fn systemd_slices_pod_sits_at_exact_scopes_and_leaves_nothing() {
    let test = "systemd_slices_pod_sits_at_exact_scopes_and_leaves_nothing";
    // The systemd driver's layout, made as plain directories (no systemd in the VM). The
    // kubelet passes the slice's full path as the parent; containerd turns a parent ending in
    // `.slice` into `kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>`, which runc's
    // systemd driver (and rund) expand to the nested slices plus `cri-containerd-<id>.scope`.
    let uid = format!("sd{}", std::process::id());
    let made_top = !Path::new(ROOT).join("kubepods.slice").exists();
    pod_at_exact_paths(
        test,
        |_| {
            let rel = format!(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice"
            );
            (rel.clone(), format!("/{rel}"))
        },
        |id| format!("cri-containerd-{id}.scope"),
    );
    // The QoS slices are the kubelet's and stay; the test's own go (only if it made them;
    // a skipped run made none).
    if made_top && Path::new(ROOT).join("kubepods.slice").exists() {
        for d in ["kubepods.slice/kubepods-besteffort.slice", "kubepods.slice"] {
            std::fs::remove_dir(Path::new(ROOT).join(d))
                .unwrap_or_else(|e| panic!("rmdir {d}: {e}"));
        }
    }
}

/// The kubelet-shaped pod: `pod_cgroup` gives the pod cgroup (relative to the v2 root) and the
/// CRI `cgroup_parent`; `name_of` the child cgroup name a container id must have.
fn pod_at_exact_paths(
    test: &str,
    pod_cgroup: impl FnOnce(&Containerd) -> (String, String),
    name_of: impl Fn(&str) -> String,
) {
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
    let (pod_rel, parent) = pod_cgroup(&ctd);
    make_cgroup_like_the_kubelet(Path::new(ROOT), &pod_rel);
    let root = Path::new(ROOT);
    let pod = PodSpec::new("kubelet", &parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let exited = |id: &str| {
        cri.container_status(id)
            .is_ok_and(|s| s.state == ContainerState::ContainerExited as i32)
    };
    let only = |ids: &[&String]| {
        let (mut visible, hidden) = cgroup_children(root, &pod_rel);
        visible.sort();
        let mut want: Vec<String> = ids.iter().map(|id| name_of(id)).collect();
        want.sort();
        (visible, hidden) == (want, vec![])
    };
    // The container's processes are in its own cgroup, at its exact path.
    let assert_placed = |what: &str, ids: &[&String], id: &str| {
        assert!(only(ids), "{what}: {:?}", cgroup_children(root, &pod_rel));
        let procs =
            std::fs::read_to_string(root.join(&pod_rel).join(name_of(id)).join("cgroup.procs"))
                .unwrap_or_default();
        assert!(
            !procs.trim().is_empty(),
            "{what}: no process at its exact path"
        );
    };
    assert_placed("the sandbox", &[&pod_id], &pod_id);

    // An init container that runs until told to stop, then exits 0.
    let init = ContainerSpec::new(
        "init",
        BUSYBOX_IMAGE,
        &["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
    );
    let init_id = cri.create_and_start(&pod_id, &init, &pod).expect("init");
    assert_placed("init", &[&pod_id, &init_id], &init_id);
    cri.stop_container(&init_id, 10)
        .expect("StopContainer init");
    wait_for("init exited", || exited(&init_id));
    let code = cri.container_status(&init_id).expect("status").exit_code;
    assert_eq!(code, 0, "init's exit code");
    cri.remove_container(&init_id)
        .expect("RemoveContainer init");
    wait_for("only the sandbox's cgroup once init is removed", || {
        only(&[&pod_id])
    });
    for round in 0..2 {
        let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
        let app_id = cri.create_and_start(&pod_id, &app, &pod).expect("app");
        assert_placed(&format!("app, round {round}"), &[&pod_id, &app_id], &app_id);
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
    let states = rund_tests::shim::residue::pool_states(&state);
    assert_eq!(
        states,
        Vec::<String>::new(),
        "pool state was made for a pod's cgroup"
    );
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
