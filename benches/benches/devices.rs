//! The host-side device-discovery scan rund-devices does at Create: the sysfs
//! RDMA walk, /proc/devices and the NVIDIA driver files (no NVML).
//! On this machine (no RDMA, no GPU) it measures the cost of finding nothing,
//! which is what every non-device container pays if it is not skipped.
//!
//! Needs rund-devices: build with `--features devices-bench`. Without it,
//! this bench prints why and measures nothing.
//!
//! TODO(devices): add a fake sysfs tree with N RDMA devices (rund-devices'
//! `test-support` testutil) to show how the scan scales, and
//! `prepare_spec` on a spec with an RDMA request.

#[cfg(feature = "devices-bench")]
mod real {
    use criterion::Criterion;
    use std::hint::black_box;

    pub fn benches(c: &mut Criterion) {
        let cfg = rund_devices::DeviceConfig::default();
        let found = rund_devices::scan_for_bench(&cfg);
        eprintln!(
            "devices bench: host has {} RDMA devices ({} nodes), {} GPU control nodes, {} driver files",
            found.rdma_devices, found.rdma_nodes, found.gpu_control_nodes, found.driver_files
        );
        c.bench_function("devices/scan (host, no NVML)", |b| {
            b.iter(|| rund_devices::scan_for_bench(black_box(&cfg)))
        });
    }
}

fn main() {
    #[cfg(feature = "devices-bench")]
    {
        let mut c = criterion::Criterion::default().configure_from_args();
        real::benches(&mut c);
        c.final_summary();
    }
    #[cfg(not(feature = "devices-bench"))]
    eprintln!("devices bench: skipped; build with `--features devices-bench` (needs rund-devices)");
}
