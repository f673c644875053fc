use super::*;
use oci_spec::runtime::{ProcessBuilder, SpecBuilder};
use std::collections::HashMap;

fn spec(env: &[&str], ann: &[(&str, &str)]) -> Spec {
    let process = ProcessBuilder::default()
        .env(env.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .unwrap();
    let ann: HashMap<String, String> = ann
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    SpecBuilder::default()
        .process(process)
        .annotations(ann)
        .build()
        .unwrap()
}

#[test]
fn nothing_requested() {
    let r = DeviceRequest::from_spec(&spec(&["PATH=/bin"], &[])).unwrap();
    assert!(r.is_empty());
    assert!(!r.needs_nvml());
    assert!(!r.wants_rdma());
    let r = DeviceRequest::from_spec(&Spec::default()).unwrap();
    assert!(r.is_empty());
}

#[test]
fn visible_devices_forms() {
    let g = |v: &str| {
        DeviceRequest::from_spec(&spec(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")], &[]))
            .map(|r| r.gpus)
    };
    assert_eq!(g("all").unwrap(), GpuSelection::All);
    assert_eq!(g("none").unwrap(), GpuSelection::DriverOnly);
    assert_eq!(g("void").unwrap(), GpuSelection::Nothing);
    assert_eq!(g("").unwrap(), GpuSelection::Nothing);
    assert_eq!(
        g("1, GPU-abc,1").unwrap(),
        GpuSelection::List(vec![GpuId::Index(1), GpuId::Uuid("GPU-abc".into())])
    );
    for bad in ["gpu0", "0,all", "-1", "GPU-a/b", "1,,2", "99999999999"] {
        let err = g(bad).unwrap_err();
        assert!(
            matches!(err, DeviceError::InvalidRequest { .. }),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("NVIDIA_VISIBLE_DEVICES"), "{err}");
    }
}

#[test]
fn env_last_wins_and_annotation_wins() {
    let r = DeviceRequest::from_spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0"],
        &[],
    ))
    .unwrap();
    assert_eq!(r.gpus, GpuSelection::List(vec![GpuId::Index(0)]));
    let r = DeviceRequest::from_spec(&spec(
        &["NVIDIA_VISIBLE_DEVICES=all"],
        &[(rund_annotations::GPUS, "1")],
    ))
    .unwrap();
    assert_eq!(r.gpus, GpuSelection::List(vec![GpuId::Index(1)]));
    assert!(r.needs_nvml());
}

#[test]
fn capabilities() {
    let r = DeviceRequest::from_spec(&spec(&["NVIDIA_VISIBLE_DEVICES=0"], &[])).unwrap();
    assert_eq!(r.capabilities.to_string(), "compute,utility");
    let r = DeviceRequest::from_spec(&spec(&["NVIDIA_DRIVER_CAPABILITIES=video"], &[])).unwrap();
    assert_eq!(r.capabilities.to_string(), "video");
    assert!(DeviceRequest::from_spec(&spec(&["NVIDIA_DRIVER_CAPABILITIES=bogus"], &[])).is_err());
}

#[test]
fn rdma_forms() {
    let r = |v: &str| {
        DeviceRequest::from_spec(&spec(&[], &[(rund_annotations::RDMA_DEVICES, v)])).map(|r| r.rdma)
    };
    assert_eq!(r("all").unwrap(), RdmaSelection::All);
    assert_eq!(r("none").unwrap(), RdmaSelection::Nothing);
    assert_eq!(
        r("mlx5_0, mlx5_1").unwrap(),
        RdmaSelection::List(vec![
            RdmaId::Device("mlx5_0".into()),
            RdmaId::Device("mlx5_1".into())
        ])
    );
    assert_eq!(
        r("netdev:eth1").unwrap(),
        RdmaSelection::List(vec![RdmaId::Netdev("eth1".into())])
    );
    assert!(
        DeviceRequest::from_spec(&spec(&[], &[(rund_annotations::RDMA_DEVICES, "all")]))
            .unwrap()
            .wants_rdma()
    );
    for bad in [
        "mlx5_0,all",
        "../x",
        "netdev:",
        "netdev:a/b",
        "mlx5_0,,x",
        "foo:bar",
    ] {
        let err = r(bad).unwrap_err();
        assert!(
            err.to_string().contains(rund_annotations::RDMA_DEVICES),
            "{bad}: {err}"
        );
    }
}

#[test]
fn cdi_annotations() {
    let r = DeviceRequest::from_spec(&spec(
        &[],
        &[
            ("cdi.k8s.io/b", "rund.io/rdma=mlx5_0"),
            ("cdi.k8s.io/a", "nvidia.com/gpu=0,nvidia.com/gpu=1"),
            ("other/x", "not-cdi"),
        ],
    ))
    .unwrap();
    let names: Vec<String> = r.cdi_devices.iter().map(|n| n.to_string()).collect();
    assert_eq!(
        names,
        [
            "nvidia.com/gpu=0",
            "nvidia.com/gpu=1",
            "rund.io/rdma=mlx5_0"
        ]
    );
    assert!(r.wants_rdma(), "an rdma CDI class means RDMA");
    assert!(!r.needs_nvml(), "CDI does not need NVML");

    let err =
        DeviceRequest::from_spec(&spec(&[], &[("cdi.k8s.io/x", "nvidia.com/gpu")])).unwrap_err();
    assert!(matches!(err, DeviceError::MalformedCdiName { .. }));
    assert!(err.to_string().contains("cdi.k8s.io/x"), "{err}");
}
