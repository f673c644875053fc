use rund_devices::testutil::FAKE_GPU_UUIDS;
use rund_devices::{devices_json, devices_table, scan_for_bench, ScanStats};

use crate::{fake_nvml, host};

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
    let Some(lib) = fake_nvml() else { return };
    let (_t, h) = host();
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

#[test]
fn bench_scan_counts_the_fake_tree() {
    let (_t, h) = host();
    let stats = scan_for_bench(&h.config());
    assert_eq!(
        stats,
        ScanStats {
            rdma_devices: 2,
            rdma_nodes: 2 * 3 + 1,
            gpu_control_nodes: 4,
            // libcuda, libnvidia-ml, libnvidia-ptxjitcompiler (x2 names each) + 2 binaries
            driver_files: 8,
        }
    );
}
