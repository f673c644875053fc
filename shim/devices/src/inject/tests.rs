use super::*;
use crate::resolve::Resolved;
use oci_spec::runtime::{LinuxDeviceCgroup, Mount, ProcessBuilder, SpecBuilder};

fn node(path: &str, major: i64, minor: i64) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        host_path: format!("/host{path}").into(),
        major,
        minor,
        file_mode: 0o666,
    }
}

fn base_spec() -> Spec {
    let process = ProcessBuilder::default()
        .env(vec![
            "PATH=/bin".to_string(),
            "NVIDIA_VISIBLE_DEVICES=all".to_string(),
        ])
        .build()
        .unwrap();
    // SpecBuilder's default carries the default mounts; start from none to count ours.
    SpecBuilder::default()
        .process(process)
        .mounts(vec![])
        .build()
        .unwrap()
}

fn resolved() -> Resolved {
    Resolved {
        nodes: vec![
            node("/dev/nvidia7", 195, 7),
            node("/dev/infiniband/uverbs0", 231, 192),
        ],
        mounts: vec![BindMount {
            source: "/usr/lib/libcuda.so.1".into(),
            destination: "/usr/lib/libcuda.so.1".into(),
        }],
        env: vec![("NVIDIA_VISIBLE_DEVICES".into(), "GPU-x".into())],
        ..Default::default()
    }
}

fn rules(spec: &Spec) -> Vec<LinuxDeviceCgroup> {
    spec.linux()
        .as_ref()
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.devices().clone())
        .unwrap_or_default()
}

#[test]
fn edits_are_what_a_runtime_needs() {
    let mut spec = base_spec();
    let report = inject(&mut spec, &resolved(), false).unwrap();

    let devs = spec.linux().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0].path(), &PathBuf::from("/dev/nvidia7"));
    assert_eq!(devs[0].typ(), LinuxDeviceType::C);
    assert_eq!((devs[0].major(), devs[0].minor()), (195, 7));
    assert_eq!(devs[0].file_mode(), Some(0o666));
    assert_eq!((devs[1].major(), devs[1].minor()), (231, 192));

    let r = rules(&spec);
    assert_eq!(r.len(), 2);
    assert!(r[0].allow());
    assert_eq!(r[0].typ(), Some(LinuxDeviceType::C));
    assert_eq!((r[0].major(), r[0].minor()), (Some(195), Some(7)));
    assert_eq!(r[0].access().as_deref(), Some("rwm"));

    let mounts: Vec<Mount> = spec.mounts().clone().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].typ().as_deref(), Some("bind"));
    assert_eq!(
        mounts[0].source().as_deref(),
        Some(std::path::Path::new("/usr/lib/libcuda.so.1"))
    );
    assert_eq!(
        mounts[0].options().clone().unwrap(),
        ["rbind", "ro", "nosuid", "nodev"]
    );

    let env = spec.process().as_ref().unwrap().env().clone().unwrap();
    assert_eq!(
        env,
        ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-x"],
        "old value replaced"
    );

    assert!(!report.bind_mount_devices);
    assert_eq!(report.devices.len(), 2);
    assert_eq!(report.devices[0].origin, "gpu");
    assert_eq!(report.devices[1].origin, "rdma");
    assert_eq!(
        report.devices[1].host_path,
        PathBuf::from("/host/dev/infiniband/uverbs0")
    );
}

#[test]
fn idempotent_and_replaces_same_path() {
    let mut spec = base_spec();
    inject(&mut spec, &resolved(), false).unwrap();
    let once = serde_json::to_value(&spec).unwrap();
    inject(&mut spec, &resolved(), false).unwrap();
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        once,
        "second injection adds nothing"
    );
}

#[test]
fn keeps_existing_deny_rule_order() {
    // containerd's default spec starts with deny-all; allow rules must come after it.
    let json = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"cwd": "/", "args": ["sh"], "env": [], "user": {"uid": 0, "gid": 0}},
        "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}]}}
    });
    let mut spec: Spec = serde_json::from_value(json).unwrap();
    inject(&mut spec, &resolved(), true).unwrap();
    let r = rules(&spec);
    assert_eq!(r.len(), 3);
    assert!(!r[0].allow(), "deny-all stays first");
    assert!(r[1].allow() && r[2].allow());
}

#[test]
fn userns_is_reported_and_devices_still_listed() {
    let mut spec = base_spec();
    let report = inject(&mut spec, &resolved(), true).unwrap();
    assert!(report.bind_mount_devices);
    assert_eq!(
        spec.linux()
            .as_ref()
            .unwrap()
            .devices()
            .as_ref()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn error_leaves_spec_untouched() {
    // No process: env cannot be set, after devices were already added to the copy.
    let mut spec = SpecBuilder::default().build().unwrap();
    spec.set_process(None);
    let before = serde_json::to_value(&spec).unwrap();
    let err = inject(&mut spec, &resolved(), false).unwrap_err();
    assert!(err.to_string().contains("no process"), "{err}");
    assert_eq!(serde_json::to_value(&spec).unwrap(), before);
}

#[test]
fn empty_resolution_changes_nothing() {
    let mut spec = base_spec();
    let before = serde_json::to_value(&spec).unwrap();
    let report = inject(&mut spec, &Resolved::default(), false).unwrap();
    assert!(report.devices.is_empty());
    assert_eq!(serde_json::to_value(&spec).unwrap(), before);
}
