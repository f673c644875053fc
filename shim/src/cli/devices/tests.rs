//! `rund devices` against the fake host tree and the fake NVML.

use std::path::PathBuf;

use rund_devices::testutil::{build_fake_nvml, FakeHost, FAKE_GPU_UUIDS};
use tempfile::TempDir;

use super::{devices_json, devices_table};

fn host() -> (TempDir, FakeHost) {
    let dir = tempfile::tempdir().unwrap();
    let h = FakeHost::build(dir.path()).unwrap();
    (dir, h)
}

fn fake_nvml(dir: &std::path::Path) -> Option<PathBuf> {
    match build_fake_nvml(&dir.join("fake-nvml")) {
        Ok(p) => Some(p),
        Err(e) => rund_skip::skip!("cannot build fake NVML: {e}"),
    }
}

#[test]
fn listing_without_nvml_is_not_an_error() {
    let (_t, h) = host();
    let cfg = h.config();
    let table = devices_table(&cfg);
    assert!(table.contains("GPUs: no NVML:"), "{table}");
    assert!(
        table.contains("mlx5_0") && table.contains("DOWN"),
        "{table}"
    );
    let j = devices_json(&cfg);
    assert!(
        j["gpus"]["nvml"].as_str().unwrap().starts_with("no NVML: "),
        "{j}"
    );
    assert_eq!(j["rdma"].as_array().unwrap().len(), 2);
    assert_eq!(j["rdma"][1]["ports"][0]["state"], "DOWN");
    assert_eq!(j["rdma_cm"]["minor"], 58);
}

#[test]
fn listing_with_fake_nvml() {
    let (t, h) = host();
    let Some(lib) = fake_nvml(t.path()) else {
        return;
    };
    let cfg = h.config_with_nvml(&lib);
    let table = devices_table(&cfg);
    assert!(
        table.contains(FAKE_GPU_UUIDS[1]) && table.contains("/dev/nvidia7 (195:7)"),
        "{table}"
    );
    let j = devices_json(&cfg);
    assert_eq!(j["gpus"]["devices"][1]["minor"], 7);
    assert_eq!(j["gpus"]["driver_version"], "550.54.15");
}
