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

    use rund_devices::devnode::ProcDevices;
    use rund_devices::gpu::{self, DriverCapabilities};
    use rund_devices::{rdma, DeviceConfig};

    /// Counts from one scan, so the loop can `black_box` them.
    pub struct ScanStats {
        pub rdma_devices: usize,
        pub rdma_nodes: usize,
        pub gpu_control_nodes: usize,
        pub driver_files: usize,
    }

    /// The host-side scan without NVML: sysfs RDMA walk, `/proc/devices`, driver files.
    pub fn scan(cfg: &DeviceConfig) -> ScanStats {
        let devs = rdma::discover_rdma(cfg);
        let pd = ProcDevices::read(&cfg.proc_devices).unwrap_or_default();
        let (ctl, _) = gpu::gpu_control_nodes(cfg, &pd);
        ScanStats {
            rdma_devices: devs.len(),
            rdma_nodes: devs.iter().map(|d| d.nodes().count()).sum::<usize>()
                + usize::from(rdma::rdma_cm_node(cfg).is_some()),
            gpu_control_nodes: ctl.len(),
            driver_files: gpu::driver_files(cfg, &DriverCapabilities::default()).len(),
        }
    }

    pub fn benches(c: &mut Criterion) {
        let cfg = DeviceConfig::default();
        let found = scan(&cfg);
        eprintln!(
            "devices bench: host has {} RDMA devices ({} nodes), {} GPU control nodes, {} driver files",
            found.rdma_devices, found.rdma_nodes, found.gpu_control_nodes, found.driver_files
        );
        c.bench_function("devices/scan (host, no NVML)", |b| {
            b.iter(|| scan(black_box(&cfg)))
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
