use oci_spec::runtime::{ProcessBuilder, Spec, SpecBuilder};
use rund_devices::testutil::{FAKE_GPU_UUIDS, IB_MAJOR, RDMA_CM_DEV};
use rund_devices::{prepare_spec, DeviceError, DeviceRequest};

use crate::{fake_nvml, host};

fn spec(env: &[&str], ann: &[(&str, &str)]) -> Spec {
    let process = ProcessBuilder::default()
        .env(env.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .unwrap();
    SpecBuilder::default()
        .process(process)
        .annotations(
            ann.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::HashMap<_, _>>(),
        )
        .build()
        .unwrap()
}

fn devices(s: &Spec) -> Vec<(String, i64, i64)> {
    s.linux()
        .as_ref()
        .and_then(|l| l.devices().clone())
        .unwrap_or_default()
        .iter()
        .map(|d| (d.path().display().to_string(), d.major(), d.minor()))
        .collect()
}

fn env_of(s: &Spec, key: &str) -> Option<String> {
    s.process()
        .as_ref()?
        .env()
        .as_ref()?
        .iter()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

fn json(s: &Spec) -> serde_json::Value {
    serde_json::to_value(s).unwrap()
}

#[test]
fn nothing_requested_touches_nothing() {
    let (_t, h) = host();
    // NVML points at a missing file: the test fails if anything tries to load it.
    let mut s = spec(&["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"], &[]);
    let before = json(&s);
    let (req, report) = prepare_spec(&h.config(), &mut s, false).unwrap();
    assert!(req.is_empty() && !req.wants_rdma());
    assert!(report.devices.is_empty());
    assert_eq!(json(&s), before);
}

#[test]
fn driver_only_needs_no_nvml() {
    let (_t, h) = host();
    let mut s = spec(&["NVIDIA_VISIBLE_DEVICES=none"], &[]);
    let (_, report) = prepare_spec(&h.config(), &mut s, false).unwrap();
    let devs = devices(&s);
    assert!(devs.iter().any(|d| d.0 == "/dev/nvidiactl"));
    assert!(!devs
        .iter()
        .any(|d| d.0 == "/dev/nvidia3" || d.0 == "/dev/nvidia7"));
    assert!(!report.mounts.is_empty(), "driver libraries still mounted");
    assert_eq!(
        env_of(&s, "NVIDIA_VISIBLE_DEVICES").as_deref(),
        Some("none")
    );
}

#[test]
fn gpu_by_index_gets_minor_node_control_nodes_libs_env() {
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
    let cfg = h.config_with_nvml(&lib);
    let mut s = spec(&["NVIDIA_VISIBLE_DEVICES=1"], &[]);
    let (req, report) = prepare_spec(&cfg, &mut s, false).unwrap();
    assert!(!req.wants_rdma());
    let devs = devices(&s);
    assert!(devs.contains(&("/dev/nvidia7".into(), 195, 7)), "{devs:?}");
    assert!(
        !devs.iter().any(|d| d.0 == "/dev/nvidia3"),
        "GPU 0 not injected"
    );
    assert!(
        !devs.iter().any(|d| d.0 == "/dev/nvidia1"),
        "index is not the minor"
    );
    assert!(devs.contains(&("/dev/nvidia-uvm".into(), 509, 0)));
    assert_eq!(
        env_of(&s, "NVIDIA_VISIBLE_DEVICES").as_deref(),
        Some(FAKE_GPU_UUIDS[1])
    );
    assert_eq!(
        env_of(&s, "NVIDIA_DRIVER_CAPABILITIES").as_deref(),
        Some("compute,utility")
    );
    let mounts = s.mounts().clone().unwrap();
    let cuda = h.lib_dir.join("libcuda.so.1");
    let m = mounts
        .iter()
        .find(|m| m.destination() == &cuda)
        .expect("libcuda mounted");
    assert_eq!(m.source().as_deref(), Some(cuda.as_path()));
    assert_eq!(
        m.options().clone().unwrap(),
        ["rbind", "ro", "nosuid", "nodev"]
    );
    assert_eq!(report.gpus, [FAKE_GPU_UUIDS[1]]);
}

#[test]
fn gpu_by_uuid_and_all() {
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
    let cfg = h.config_with_nvml(&lib);
    let mut s = spec(&[], &[("rund.io/gpus", FAKE_GPU_UUIDS[0])]);
    prepare_spec(&cfg, &mut s, false).unwrap();
    assert!(devices(&s).contains(&("/dev/nvidia3".into(), 195, 3)));
    let mut s = spec(&["NVIDIA_VISIBLE_DEVICES=all"], &[]);
    prepare_spec(&cfg, &mut s, false).unwrap();
    let d = devices(&s);
    assert!(d.iter().any(|x| x.0 == "/dev/nvidia3") && d.iter().any(|x| x.0 == "/dev/nvidia7"));
    assert!(!d.iter().any(|x| x.0 == "/dev/nvidia5"), "not an NVML GPU");
}

#[test]
fn bad_gpu_requests_fail_cleanly() {
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
    for v in ["2", "GPU-00000000-0000-0000-0000-000000000000"] {
        let mut s = spec(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")], &[]);
        let before = json(&s);
        let err = prepare_spec(&h.config_with_nvml(&lib), &mut s, false).unwrap_err();
        assert!(matches!(err, DeviceError::UnknownGpu { .. }), "{err}");
        assert!(
            err.to_string().contains(FAKE_GPU_UUIDS[0]),
            "lists what exists: {err}"
        );
        assert_eq!(json(&s), before, "spec untouched");
    }
    // GPUs requested, NVML missing.
    let mut s = spec(&["NVIDIA_VISIBLE_DEVICES=0"], &[]);
    let before = json(&s);
    let err = prepare_spec(&h.config(), &mut s, false).unwrap_err();
    assert!(matches!(err, DeviceError::NvmlUnavailable { .. }), "{err}");
    assert_eq!(json(&s), before);
}

#[test]
fn rdma_all_names_and_netdev() {
    let (_t, h) = host();
    let cfg = h.config();
    let mut s = spec(&[], &[("rund.io/rdma-devices", "all")]);
    let (req, report) = prepare_spec(&cfg, &mut s, false).unwrap();
    assert!(req.wants_rdma());
    let d = devices(&s);
    for (p, min) in [
        ("uverbs0", 192),
        ("uverbs1", 193),
        ("umad0", 0),
        ("issm1", 65),
    ] {
        assert!(
            d.contains(&(format!("/dev/infiniband/{p}"), IB_MAJOR, min)),
            "{p}: {d:?}"
        );
    }
    assert!(d.contains(&(
        "/dev/infiniband/rdma_cm".into(),
        RDMA_CM_DEV.0,
        RDMA_CM_DEV.1
    )));
    assert_eq!(report.rdma_devices, ["mlx5_0", "mlx5_1"]);
    assert_eq!(
        env_of(&s, "RUND_RDMA_DEVICES").as_deref(),
        Some("mlx5_0,mlx5_1")
    );

    let mut s = spec(&[], &[("rund.io/rdma-devices", "netdev:eth1")]);
    prepare_spec(&cfg, &mut s, true).unwrap();
    let d = devices(&s);
    assert!(d.iter().any(|x| x.0 == "/dev/infiniband/uverbs1"));
    assert!(
        !d.iter().any(|x| x.0 == "/dev/infiniband/uverbs0"),
        "only eth1's device"
    );

    let mut s = spec(&[], &[("rund.io/rdma-devices", "mlx5_0")]);
    let (_, report) = prepare_spec(&cfg, &mut s, true).unwrap();
    assert!(report.bind_mount_devices);
    let uv = report
        .devices
        .iter()
        .find(|x| x.path == "/dev/infiniband/uverbs0")
        .unwrap();
    assert_eq!(uv.host_path, h.dev.join("infiniband/uverbs0"));
    assert!(!devices(&s).iter().any(|x| x.0 == "/dev/infiniband/uverbs1"));
}

#[test]
fn bad_rdma_requests_fail_cleanly() {
    let (_t, h) = host();
    let cases = [
        (
            "mlx5_9",
            "unknown RDMA device \"mlx5_9\" (available: mlx5_0, mlx5_1)",
        ),
        ("netdev:eth0", "no RDMA device behind netdev \"eth0\""),
        ("mlx5_0,../x", "bad RDMA device name"),
    ];
    for (v, want) in cases {
        let mut s = spec(&[], &[("rund.io/rdma-devices", v)]);
        let before = json(&s);
        let err = prepare_spec(&h.config(), &mut s, false).unwrap_err();
        assert!(err.to_string().contains(want), "{v}: {err}");
        assert_eq!(json(&s), before);
    }
    // `all` on a host without RDMA.
    let cfg = rund_devices::DeviceConfig {
        sysfs_root: h.root.join("empty"),
        ..h.config()
    };
    let mut s = spec(&[], &[("rund.io/rdma-devices", "all")]);
    let err = prepare_spec(&cfg, &mut s, false).unwrap_err();
    assert!(matches!(err, DeviceError::NoRdmaDevices { .. }), "{err}");
}

#[test]
fn request_parses_without_host() {
    let s = spec(
        &["NVIDIA_VISIBLE_DEVICES=0,GPU-x"],
        &[("rund.io/rdma-devices", "mlx5_0")],
    );
    let req = DeviceRequest::from_spec(&s).unwrap();
    assert!(req.needs_nvml() && req.wants_rdma());
}
