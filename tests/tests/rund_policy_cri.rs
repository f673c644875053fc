//! The policy and the user namespace modes on the Kubernetes path (containerd 1.6's CRI, handler
//! `rund`): a CDI device named by a *pod* annotation is refused, the same device allocated as a
//! *container* annotation (as the kubelet passes a device plugin's) is injected; under
//! `[userns] mode = "always"` a pod is remapped, and a container adding CAP_NET_ADMIN in the
//! host-owned pod network namespace is refused naming the mode and the key, and a pod in its own
//! network namespace gets `ip_unprivileged_port_start=0` (its remapped root binds port 80).
//! rund only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rund_tests::{
    assert_no_leaks_within, runtime_under_test, ContainerSpec, Containerd, ContainerdOpts,
    LeakSnapshot, PodSpec, BUSYBOX_IMAGE, RUND_RUNTIME,
};

const SETTLE: Duration = Duration::from_secs(15);

/// A CRI containerd whose rund config is `body` (plus a private state dir), written to `dir`.
fn start(test: &str, dir: &Path, body: &str) -> Option<Containerd> {
    start_with(test, dir, body, Vec::new())
}

/// [`start`], with containerd 2.x's own CDI spec dirs.
fn start_with(test: &str, dir: &Path, body: &str, cdi: Vec<PathBuf>) -> Option<Containerd> {
    start_opts(test, dir, body, cdi, ContainerdOpts::new().cri())
}

fn start_opts(
    test: &str,
    dir: &Path,
    body: &str,
    cdi: Vec<PathBuf>,
    base: ContainerdOpts,
) -> Option<Containerd> {
    if runtime_under_test() != RUND_RUNTIME {
        let _ = test;
        rund_tests::skip!("the policy is rund's");
    }
    let cfg = dir.join("rund.toml");
    let state = dir.join("state");
    let text = format!("state_dir = {:?}\n{body}", state.display().to_string());
    std::fs::write(&cfg, text).unwrap();
    let opts = ContainerdOpts {
        rund_config_path: Some(cfg),
        cdi_spec_dirs: cdi,
        ..base
    };
    Containerd::start_rund_or_skip(test, opts)
}

/// The gRPC status message of a failed call (what the kubelet shows).
fn message(err: &rund_tests::CriError) -> String {
    err.status()
        .map(|s| s.message().to_string())
        .unwrap_or_else(|| err.to_string())
}

fn uid_map_of(cri: &rund_tests::CriClient, id: &str) -> String {
    let r = cri
        .exec_sync(id, &["cat", "/proc/self/uid_map"], 10)
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    String::from_utf8_lossy(&r.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn cdi_devices_from_pod_annotations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cdi = dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let device = r#"{"cdiVersion":"0.5.0","kind":"rund.test/probe","devices":[{"name":"one","containerEdits":{"env":["PROBE=one"]}}]}"#;
    std::fs::write(cdi.join("probe.json"), device).unwrap();
    let body = format!(
        "[devices]\ncdi_spec_dirs = [{:?}]\n",
        cdi.display().to_string()
    );
    let test = "cdi_devices_from_pod_annotations_are_refused";
    // containerd 2.x resolves a container's CDI annotations itself, from its own spec dirs,
    // before rund sees them (1.6 leaves them to rund): both read the same dir here.
    let Some(ctd) = start_with(test, dir.path(), &body, vec![cdi.clone()]) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let ann = (
        "cdi.k8s.io/probe".to_string(),
        "rund.test/probe=one".to_string(),
    );
    let sleeper = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);

    // The pod author's own request.
    let mut pod = PodSpec::new("cdipod", &ctd.cgroup_parent);
    pod.annotations.extend([ann.clone()]);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    // containerd 1.6 creates the task (rund's Create) at StartContainer.
    let err = cri
        .create_and_start(&pod_id, &sleeper, &pod)
        .expect_err("a pod-level CDI request is refused");
    let text = message(&err);
    for needle in [
        "pod annotation cdi.k8s.io/probe",
        "[policy] allowed_cdi_devices",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    cri.remove_pod(&pod_id);

    // The device plugin's allocation, as a container annotation.
    let pod = PodSpec::new("cdictr", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    // The device's edits reach the container's own process (an exec gets containerd's spec).
    let script = "echo $PROBE > /tmp/probe; sleep 1000";
    let mut app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sh", "-c", script]);
    app.annotations.extend([ann]);
    let id = cri
        .create_and_start(&pod_id, &app, &pod)
        .expect("allocated device");
    let r = cri
        .exec_sync(
            &id,
            &[
                "sh",
                "-c",
                "until [ -s /tmp/probe ]; do sleep 0.1; done; cat /tmp/probe",
            ],
            10,
        )
        .unwrap();
    assert_eq!(r.stdout, b"one\n", "{r:?}");
    cri.remove_pod(&pod_id);
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, SETTLE);
}

#[test]
fn always_mode_remaps_pods_and_refuses_net_admin_in_a_host_netns() {
    let dir = tempfile::tempdir().unwrap();
    let test = "always_mode_remaps_pods_and_refuses_net_admin_in_a_host_netns";
    let Some(ctd) = start(test, dir.path(), "[userns]\nmode = \"always\"\n") else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    // The harness's pods use the host network: a network namespace the host owns.
    let pod = PodSpec::new("always", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
    let id = cri
        .create_and_start(&pod_id, &app, &pod)
        .expect("plain container");
    let map = uid_map_of(&cri, &id);
    assert!(!map.starts_with("0 0 "), "remapped: {map}");
    let mut admin = ContainerSpec::new("admin", BUSYBOX_IMAGE, &["sleep", "1000"]);
    admin.add_capabilities = vec!["NET_ADMIN".into()];
    let err = cri
        .create_and_start(&pod_id, &admin, &pod)
        .expect_err("NET_ADMIN in a host netns under mode always");
    let text = message(&err);
    for needle in [
        "CAP_NET_ADMIN",
        "[userns] on_privileged",
        "mode = \"always\"",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    cri.remove_pod(&pod_id);
    assert!(cri.list_pod_sandboxes().unwrap().is_empty());
    assert_no_leaks_within(&ctd, &before, SETTLE);
}

/// Under `mode = "always"` a pod in its own (CNI-made, host-owned) network namespace gets
/// `net.ipv4.ip_unprivileged_port_start=0`, as containerd sets it for `hostUsers: false`: the
/// remapped root binds port 80 there.
#[test]
fn always_mode_opens_low_ports_in_a_pod_network() {
    let dir = tempfile::tempdir().unwrap();
    let test = "always_mode_opens_low_ports_in_a_pod_network";
    let base = ContainerdOpts::new().pod_network();
    let body = "[userns]\nmode = \"always\"\n";
    let Some(ctd) = start_opts(test, dir.path(), body, Vec::new(), base) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let mut pod = PodSpec::new("always-net", &ctd.cgroup_parent);
    pod.host_network = false;
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let web = ContainerSpec::new("web", BUSYBOX_IMAGE, &["sh", "-c", "exec httpd -f -p 80"]);
    let id = cri.create_and_start(&pod_id, &web, &pod).expect("web");
    let map = uid_map_of(&cri, &id);
    assert!(!map.starts_with("0 0 "), "remapped: {map}");
    let sysctl = cri
        .exec_sync(
            &id,
            &["cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"],
            10,
        )
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sysctl.stdout), "0\n", "{sysctl:?}");
    // httpd listening on :80 (0050; v4 or v6), state LISTEN (0A), in the pod's namespace.
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let tcp = cri
            .exec_sync(&id, &["cat", "/proc/net/tcp", "/proc/net/tcp6"], 10)
            .unwrap();
        let tcp = String::from_utf8_lossy(&tcp.stdout).to_string();
        let listening = tcp.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(":0050") && f[3] == "0A"
        });
        if listening {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on :80: {tcp}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cri.remove_pod(&pod_id);
    assert_no_leaks_within(&ctd, &before, SETTLE);
}
