use rund_devices::devnode::ProcDevices;
use rund_devices::gpu::{
    discover_gpus, driver_files, gpu_control_nodes, probe_nvml, DriverCapabilities,
};
use rund_devices::testutil::{
    FAKE_DRIVER_VERSION, FAKE_GPU_MINORS, FAKE_GPU_UUIDS, FAKE_UVM_MAJOR,
};
use rund_devices::DeviceError;

use crate::{fake_nvml, host};

#[test]
fn fake_nvml_two_gpus_minor_is_not_index() {
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
    let cfg = h.config_with_nvml(&lib);
    let probe = probe_nvml(&cfg).unwrap();
    assert_eq!(probe.driver_version.as_deref(), Some(FAKE_DRIVER_VERSION));
    let gpus = probe.gpus;
    assert_eq!(gpus.len(), 2);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.index, i as u32);
        assert_eq!(g.uuid, FAKE_GPU_UUIDS[i]);
        assert_eq!(g.minor, FAKE_GPU_MINORS[i]);
        assert_ne!(g.minor, g.index);
        assert_eq!(g.node.path, format!("/dev/nvidia{}", FAKE_GPU_MINORS[i]));
        assert_eq!(
            (g.node.major, g.node.minor),
            (195, i64::from(FAKE_GPU_MINORS[i]))
        );
        assert_eq!(
            g.node.host_path,
            h.dev.join(format!("nvidia{}", FAKE_GPU_MINORS[i]))
        );
    }
    assert_eq!(gpus[1].name, "Fake A100-SXM4-80GB");
    assert_eq!(gpus[1].pci_bus_id, "00000000:AF:00.0");
    assert_eq!(gpus[1].memory_total_bytes, 80 << 30);
    // A second session works: shutdown balanced the init.
    assert_eq!(discover_gpus(&cfg).unwrap().len(), 2);
}

#[test]
fn missing_nvml_is_a_typed_error() {
    let (_t, h) = host();
    let err = discover_gpus(&h.config()).unwrap_err();
    assert!(matches!(err, DeviceError::NvmlUnavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("no-nvml/libnvidia-ml.so.1"),
        "{err}"
    );
}

#[test]
fn control_nodes_use_proc_devices_for_uvm() {
    let (_t, h) = host();
    let cfg = h.config();
    let pd = ProcDevices::read(&cfg.proc_devices).unwrap();
    let (nodes, warnings) = gpu_control_nodes(&cfg, &pd);
    let got: Vec<(&str, i64, i64)> = nodes
        .iter()
        .map(|n| (n.path.as_str(), n.major, n.minor))
        .collect();
    assert_eq!(
        got,
        [
            ("/dev/nvidiactl", 195, 255),
            ("/dev/nvidia-modeset", 195, 254),
            ("/dev/nvidia-uvm", FAKE_UVM_MAJOR, 0),
            ("/dev/nvidia-uvm-tools", FAKE_UVM_MAJOR, 1),
        ]
    );
    assert!(warnings.is_empty());

    // Without nvidia-uvm in /proc/devices: no uvm nodes, and a warning saying why.
    let pd = ProcDevices::parse("Character devices:\n195 nvidia-frontend\n");
    let (nodes, warnings) = gpu_control_nodes(&cfg, &pd);
    assert!(nodes.iter().all(|n| !n.path.contains("uvm")));
    assert!(warnings[0].contains("nvidia-uvm"), "{warnings:?}");
}

#[test]
fn driver_files_follow_capabilities() {
    let (_t, h) = host();
    let cfg = h.config();
    let names = |caps: &str| -> Vec<String> {
        driver_files(&cfg, &DriverCapabilities::parse(caps).unwrap())
            .iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let default = names("");
    for want in [
        "libcuda.so.1",
        "libcuda.so.550.54.15",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        "nvidia-smi",
        "nvidia-cuda-mps-control",
    ] {
        assert!(
            default.iter().any(|n| n == want),
            "{want} missing from {default:?}"
        );
    }
    assert!(
        !default.iter().any(|n| n.starts_with("libnvidia-encode")),
        "video not asked"
    );
    assert!(
        !default.iter().any(|n| n == "libcuda.so"),
        "dev symlink not mounted"
    );
    assert!(!default.iter().any(|n| n.starts_with("libunrelated")));

    let utility = names("utility");
    assert!(utility.iter().any(|n| n == "nvidia-smi"));
    assert!(!utility.iter().any(|n| n.starts_with("libcuda")));
    assert!(names("video")
        .iter()
        .any(|n| n.starts_with("libnvidia-encode")));
}

/// What `rund helper nvml` prints for the fake NVML, read back by the shim's
/// side, is what NVML in-process finds.
#[test]
fn the_nvml_helpers_reply_carries_the_same_gpus() {
    use rund_devices::gpu::helper::serve;
    use rund_devices::gpu::{GpuSource, NvmlHelper};
    use std::os::unix::fs::PermissionsExt;
    let Some(lib) = fake_nvml() else { return };
    let (t, h) = host();
    let cfg = h.config_with_nvml(&lib);
    let reply = t.path().join("reply.json");
    std::fs::write(&reply, serve(&serde_json::to_vec(&cfg).unwrap())).unwrap();
    let program = t.path().join("rund");
    std::fs::write(
        &program,
        format!("#!/bin/sh\ncat >/dev/null\ncat {}\n", reply.display()),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let helper = NvmlHelper {
        program,
        deadline: std::time::Duration::from_secs(30),
    };
    assert_eq!(helper.discover(&cfg).unwrap(), discover_gpus(&cfg).unwrap());
    assert_eq!(helper.discover(&cfg).unwrap().len(), 2);
}
