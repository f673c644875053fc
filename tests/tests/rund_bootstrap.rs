//! How containerd and rund's `start` agree on the shim's API, on both lines.
//!
//! containerd 1.6 takes `start`'s output as a plain ttrpc address and calls the task v2
//! service. containerd 2.x also takes JSON bootstrap params; rund answers it with version 3,
//! so 2.x calls the task v3 service and attaches a pod's later containers to the pod's shim
//! without running `start` for each (they get the pod's `bootstrap.json`).

use std::time::Duration;

use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, ContainerSpec, Containerd, ContainerdOpts,
    LeakSnapshot, PodSpec, RunSpec, BUSYBOX_IMAGE, K8S_NAMESPACE, RUND_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);

/// The `bootstrap=` field of the shim's "rund shim serving" log line.
fn shim_bootstrap(ctd: &Containerd) -> Vec<String> {
    let log = std::fs::read_to_string(&ctd.log).unwrap();
    log.lines()
        .filter(|l| l.contains("rund shim serving"))
        .filter_map(|l| l.split("bootstrap=").nth(1))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

/// containerd's "connecting to shim <id>" log line (1.7+ logs one per connection).
fn connect_lines(ctd: &Containerd, id: &str) -> Vec<String> {
    let log = std::fs::read_to_string(&ctd.log).unwrap();
    let needle = format!("msg=\"connecting to shim {id}\"");
    log.lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

#[test]
fn ctr_task_uses_the_callers_bootstrap() {
    if rund_bins_or_skip("ctr_task_uses_the_callers_bootstrap").is_none() {
        return;
    }
    let ctd = Containerd::start(ContainerdOpts::new()).unwrap();
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let spec = RunSpec {
        id: "boot".into(),
        rootfs: Some(rootfs),
        args: vec!["sleep".into(), "1000".into()],
        detach: true,
        ..RunSpec::new(RUND_RUNTIME)
    };
    ctd.run_spec(&spec).unwrap().check().unwrap();
    let bundle = ctd.task_bundle(&ctd.namespace, "boot");
    let address = std::fs::read_to_string(bundle.join("address")).unwrap();
    assert!(address.starts_with("unix://"), "{address:?}");
    if ctd.is_v2() {
        assert_eq!(shim_bootstrap(&ctd), ["v3"], "{}", ctd.log_tail(30));
        // containerd keeps what `start` answered and connects with it: task API v3.
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("bootstrap.json")).unwrap()).unwrap();
        assert_eq!(saved["version"], 3, "{saved}");
        assert_eq!(saved["protocol"], "ttrpc", "{saved}");
        assert_eq!(saved["address"], address.as_str(), "{saved}");
        let lines = connect_lines(&ctd, "boot");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("version=3"), "{lines:?}");
    } else {
        assert_eq!(shim_bootstrap(&ctd), ["address"], "{}", ctd.log_tail(30));
        assert!(!bundle.join("bootstrap.json").exists());
    }
    // The task works through whichever API was agreed on.
    let out = ctd.ctr(&["task", "exec", "--exec-id", "e1", "boot", "echo", "hi"]);
    let out = out.unwrap();
    assert_eq!((out.code(), out.stdout.as_str()), (0, "hi\n"), "{out:?}");
    ctd.ctr(&["task", "kill", "-s", "KILL", "boot"])
        .unwrap()
        .check()
        .unwrap();
    ctd.wait_for_status("boot", "STOPPED", GRACE).unwrap();
    ctd.ctr(&["task", "delete", "boot"])
        .unwrap()
        .check()
        .unwrap();
    ctd.ctr(&["container", "delete", "boot"])
        .unwrap()
        .check()
        .unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn cri_containers_join_the_pod_shim() {
    if rund_bins_or_skip("cri_containers_join_the_pod_shim").is_none() {
        return;
    }
    let ctd = Containerd::start(ContainerdOpts::new().cri()).unwrap();
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let pod = PodSpec::new("boot", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
    let id = cri.create_and_start(&pod_id, &app, &pod).expect("app");
    let pod_bundle = ctd.task_bundle(K8S_NAMESPACE, &pod_id);
    let app_bundle = ctd.task_bundle(K8S_NAMESPACE, &id);
    let pod_address = std::fs::read_to_string(pod_bundle.join("address")).unwrap();
    if ctd.is_v2() {
        // No `start` for the app container: containerd reused the pod's bootstrap params.
        assert!(
            !app_bundle.join("address").exists(),
            "`start` ran for the app container"
        );
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(app_bundle.join("bootstrap.json")).unwrap())
                .unwrap();
        assert_eq!(saved["version"], 3, "{saved}");
        assert_eq!(saved["address"], pod_address.as_str(), "{saved}");
        assert_eq!(
            std::fs::read_to_string(app_bundle.join("sandbox")).unwrap(),
            pod_id
        );
    } else {
        // 1.6 runs `start` for every container; it answers the pod's shim.
        let app_address = std::fs::read_to_string(app_bundle.join("address")).unwrap();
        assert_eq!(app_address, pod_address);
    }
    let out = cri
        .exec_sync(&id, &["echo", "in-pod"], 10)
        .expect("ExecSync");
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in-pod\n");
    cri.remove_pod(&pod_id);
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, GRACE);
}
