use std::collections::HashMap;

use rund_devices::{Gpu, RdmaDevice};

use super::*;

fn spec(annotations: &[(&str, &str)], env: &[&str]) -> Spec {
    let ann: HashMap<&str, &str> = annotations.iter().copied().collect();
    let text = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0}, "env": env},
        "annotations": ann,
    });
    crate::spec::parse(text.to_string().as_bytes()).unwrap()
}

fn req(s: &Spec) -> DeviceRequest {
    DeviceRequest::from_spec(s).unwrap()
}

fn policy(text: &str) -> PolicyConfig {
    crate::config::RundConfig::parse(text, std::path::Path::new("p.toml"))
        .unwrap()
        .policy
}

fn gpu(index: u32, uuid: &str) -> Gpu {
    serde_json::from_value(serde_json::json!({
        "index": index, "uuid": uuid, "name": "fake", "pci_bus_id": "0", "memory_total_bytes": 0,
        "minor": index, "node": {"path": format!("/dev/nvidia{index}"), "host_path": "/x",
        "major": 195, "minor": index, "file_mode": 438}
    }))
    .unwrap()
}

fn rdma(name: &str) -> RdmaDevice {
    serde_json::from_value(serde_json::json!({
        "name": name, "node_guid": "0", "pci_address": null, "ports": [], "uverbs": null,
        "umad": [], "issm": [], "netdevs": []
    }))
    .unwrap()
}

#[test]
fn env_gpus_are_ignored_by_default_and_noted() {
    let s = spec(&[], &["NVIDIA_VISIBLE_DEVICES=all"]);
    let a = admit(&PolicyConfig::default(), &s, None, req(&s)).unwrap();
    assert!(a.request.is_empty(), "{:?}", a.request);
    assert_eq!(a.notes.len(), 1);
    assert!(
        a.notes[0].contains("NVIDIA_VISIBLE_DEVICES=\"all\"")
            && a.notes[0].contains("accept_nvidia_visible_devices_env"),
        "{:?}",
        a.notes
    );
    // Accepted, the env is a request like the annotation: bounded by allowed_gpus.
    let p = policy("[policy]\naccept_nvidia_visible_devices_env = true\n");
    let e = admit(&p, &s, None, req(&s)).unwrap_err().to_string();
    assert!(
        e.contains("[policy] allowed_gpus") && e.contains("the list is empty"),
        "{e}"
    );
    let p =
        policy("[policy]\naccept_nvidia_visible_devices_env = true\nallowed_gpus = [\"all\"]\n");
    assert_eq!(
        admit(&p, &s, None, req(&s)).unwrap().request.gpus,
        GpuSelection::All
    );
}

#[test]
fn gpu_and_rdma_annotations_are_refused_unless_listed() {
    let s = spec(
        &[("rund.io/gpus", "all"), ("rund.io/rdma-devices", "mlx5_0")],
        &[],
    );
    let e = admit(&PolicyConfig::default(), &s, None, req(&s)).unwrap_err();
    assert!(
        e.request == "annotation rund.io/gpus=\"all\"" && e.key == "[policy] allowed_gpus",
        "{e}"
    );
    let p = policy("[policy]\nallowed_gpus = [\"0\"]\n");
    let e = admit(&p, &s, None, req(&s)).unwrap_err();
    assert!(e.reason.contains("\"all\" is not listed"), "{e}");
    let p = policy("[policy]\nallowed_gpus = [\"all\"]\n");
    let e = admit(&p, &s, None, req(&s)).unwrap_err();
    assert_eq!(e.key, "[policy] allowed_rdma_devices", "{e}");
    let p = policy("[policy]\nallowed_gpus = [\"all\"]\nallowed_rdma_devices = [\"mlx5_0\"]\n");
    admit(&p, &s, None, req(&s)).unwrap();
    let s = spec(&[("rund.io/rdma-devices", "all")], &[]);
    let e = admit(&p, &s, None, req(&s)).unwrap_err();
    assert!(e.reason.contains("\"all\" is not listed"), "{e}");
    // "none" asks for the driver only.
    let s = spec(&[("rund.io/gpus", "none")], &[]);
    assert!(admit(
        &policy("[policy]\nallowed_gpus = [\"3\"]\n"),
        &s,
        None,
        req(&s)
    )
    .is_err());
    assert!(admit(
        &policy("[policy]\nallowed_gpus = [\"none\"]\n"),
        &s,
        None,
        req(&s)
    )
    .is_ok());
}

#[test]
fn resolved_devices_must_be_listed_by_index_or_uuid() {
    let s = spec(
        &[
            ("rund.io/gpus", "0,1"),
            ("rund.io/rdma-devices", "netdev:eth1"),
        ],
        &[],
    );
    let p = policy(
        "[policy]\nallowed_gpus = [\"0\", \"GPU-bbb\"]\nallowed_rdma_devices = [\"mlx5_1\"]\n",
    );
    let a = admit(&p, &s, None, req(&s)).unwrap();
    let mut r = Resolved {
        gpus: vec![gpu(0, "GPU-aaa"), gpu(1, "GPU-BBB")],
        rdma: vec![rdma("mlx5_1")],
        ..Default::default()
    };
    check_resolved(&p, &a, &r).unwrap();
    r.gpus.push(gpu(2, "GPU-ccc"));
    let e = check_resolved(&p, &a, &r).unwrap_err();
    assert!(
        e.reason.contains("GPU 2 (GPU-ccc)") && e.request.contains("rund.io/gpus"),
        "{e}"
    );
    r.gpus.pop();
    r.rdma.push(rdma("mlx5_0"));
    let e = check_resolved(&p, &a, &r).unwrap_err();
    assert!(
        e.reason.contains("mlx5_0") && e.request.contains("netdev:eth1"),
        "{e}"
    );
}

#[test]
fn cdi_from_the_container_is_trusted_from_the_pod_only_if_listed() {
    let s = spec(&[("cdi.k8s.io/gpu", "nvidia.com/gpu=1")], &[]);
    let none = PolicyConfig::default();
    // Standalone, or a container annotation the pod does not have: the device plugin's.
    admit(&none, &s, None, req(&s)).unwrap();
    let pod: HashMap<String, String> = [("cdi.k8s.io/other".into(), "nvidia.com/gpu=1".into())]
        .into_iter()
        .collect();
    admit(&none, &s, Some(&pod), req(&s)).unwrap();
    // The same key and value on the pod: the pod author's request.
    let pod: HashMap<String, String> = [("cdi.k8s.io/gpu".into(), "nvidia.com/gpu=1".into())]
        .into_iter()
        .collect();
    let e = admit(&none, &s, Some(&pod), req(&s)).unwrap_err();
    assert!(
        e.request == "pod annotation cdi.k8s.io/gpu=\"nvidia.com/gpu=1\""
            && e.key == "[policy] allowed_cdi_devices",
        "{e}"
    );
    let p = policy("[policy]\nallowed_cdi_devices = [\"nvidia.com/gpu=*\"]\n");
    admit(&p, &s, Some(&pod), req(&s)).unwrap();
}
