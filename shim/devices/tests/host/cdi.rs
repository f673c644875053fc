use oci_spec::runtime::{ProcessBuilder, Spec, SpecBuilder};
use rund_devices::testutil::{FAKE_GPU_UUIDS, IB_MAJOR};
use rund_devices::{cdi_generate, prepare_spec, CdiRegistry, DeviceError};

use crate::{fake_nvml, host};

fn spec(ann: &[(&str, &str)]) -> Spec {
    let process = ProcessBuilder::default()
        .env(vec!["PATH=/bin".to_string()])
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

#[test]
fn generate_then_inject_round_trip() {
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
    let cfg = h.config_with_nvml(&lib);
    let out = h.root.join("var/run/cdi");
    let report = cdi_generate(&cfg, &out).unwrap();
    assert_eq!(report.written.len(), 2, "{report:?}");
    assert!(out.join("rund-nvidia.com-gpu.json").is_file());
    assert!(out.join("rund-rund.io-rdma.json").is_file());

    let reg = CdiRegistry::load(&cfg.cdi_spec_dirs);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    let names = reg.names();
    for want in [
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=all",
        &format!("nvidia.com/gpu={}", FAKE_GPU_UUIDS[1]),
        "rund.io/rdma=mlx5_0",
        "rund.io/rdma=mlx5_1",
        "rund.io/rdma=all",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }

    // Inject through CRI-style annotations; no NVML needed for CDI.
    let mut s = spec(&[
        ("cdi.k8s.io/gpu", "nvidia.com/gpu=1"),
        ("cdi.k8s.io/rdma", "rund.io/rdma=mlx5_1"),
    ]);
    let (req, report) = prepare_spec(&h.config(), &mut s, true).unwrap();
    assert!(req.wants_rdma());
    let d = devices(&s);
    assert!(d.contains(&("/dev/nvidia7".into(), 195, 7)), "{d:?}");
    assert!(
        d.contains(&("/dev/nvidiactl".into(), 195, 255)),
        "spec-wide edits: {d:?}"
    );
    assert!(d.contains(&("/dev/infiniband/uverbs1".into(), IB_MAJOR, 193)));
    assert!(d.contains(&("/dev/infiniband/rdma_cm".into(), 10, 58)));
    assert!(!d
        .iter()
        .any(|x| x.0 == "/dev/nvidia3" || x.0 == "/dev/infiniband/uverbs0"));
    let rules = s
        .linux()
        .as_ref()
        .unwrap()
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap();
    assert!(rules
        .iter()
        .any(|r| r.allow() && r.major() == Some(195) && r.minor() == Some(7)));
    assert!(s
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .any(|m| m.destination() == &h.lib_dir.join("libcuda.so.1")));
    assert_eq!(
        report.cdi_devices,
        ["nvidia.com/gpu=1", "rund.io/rdma=mlx5_1"]
    );
    let uv = report
        .devices
        .iter()
        .find(|x| x.path == "/dev/infiniband/uverbs1")
        .unwrap();
    assert_eq!(
        (uv.origin, uv.host_path.clone()),
        ("cdi", h.dev.join("infiniband/uverbs1"))
    );
    assert!(report.bind_mount_devices);
}

#[test]
fn generate_without_nvml_writes_rdma_only_and_notes_it() {
    let (_t, h) = host();
    let out = h.root.join("out");
    let report = cdi_generate(&h.config(), &out).unwrap();
    assert_eq!(report.written, [out.join("rund-rund.io-rdma.json")]);
    assert!(
        report.notes.iter().any(|n| n.starts_with("no NVML")),
        "{:?}",
        report.notes
    );
}

#[test]
fn malformed_or_unknown_cdi_names() {
    let (_t, h) = host();
    let mut s = spec(&[("cdi.k8s.io/x", "nvidia.com/gpu")]);
    let before = serde_json::to_value(&s).unwrap();
    let err = prepare_spec(&h.config(), &mut s, false).unwrap_err();
    assert!(matches!(err, DeviceError::MalformedCdiName { .. }), "{err}");
    assert_eq!(serde_json::to_value(&s).unwrap(), before);

    let mut s = spec(&[("cdi.k8s.io/x", "nvidia.com/gpu=9")]);
    let before = serde_json::to_value(&s).unwrap();
    let err = prepare_spec(&h.config(), &mut s, false).unwrap_err();
    assert!(matches!(err, DeviceError::UnknownCdiDevice { .. }), "{err}");
    assert_eq!(serde_json::to_value(&s).unwrap(), before);
}
