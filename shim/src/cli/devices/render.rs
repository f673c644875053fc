//! What `rund devices` prints: the discovered GPUs and RDMA devices, as JSON or a table.

use serde_json::{json, Value};

use rund_devices::devnode::ProcDevices;
use rund_devices::gpu::{self, DriverCapabilities};
use rund_devices::{rdma, DeviceConfig};

fn fmt_bytes(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

/// `rund devices --json`. NVML missing is reported as `"no NVML: <reason>"`.
pub fn devices_json(cfg: &DeviceConfig) -> Value {
    let rdma = rdma::discover_rdma(cfg);
    let rdma_cm = rdma::rdma_cm_node(cfg);
    let gpus = match gpu::probe_nvml(cfg) {
        Ok(p) => json!({
            "nvml": p.library,
            "driver_version": p.driver_version,
            "devices": p.gpus,
        }),
        Err(e) => json!({ "nvml": format!("no NVML: {e}"), "devices": [] }),
    };
    let pd = ProcDevices::read(&cfg.proc_devices).unwrap_or_default();
    let (ctl, warnings) = gpu::gpu_control_nodes(cfg, &pd);
    json!({
        "gpus": gpus,
        "gpu_control_nodes": ctl,
        "gpu_driver_files": gpu::driver_files(cfg, &DriverCapabilities::default()),
        "gpu_warnings": warnings,
        "rdma": rdma,
        "rdma_cm": rdma_cm,
    })
}

/// `rund devices`: a human table.
pub fn devices_table(cfg: &DeviceConfig) -> String {
    let mut out = String::new();
    match gpu::probe_nvml(cfg) {
        Ok(p) => {
            out += &format!(
                "GPUs (NVML {}, driver {}):\n",
                p.library,
                p.driver_version.as_deref().unwrap_or("?")
            );
            out += &format!(
                "{:<5} {:<42} {:<24} {:<18} {:>10}  NODE\n",
                "INDEX", "UUID", "NAME", "PCI", "MEMORY"
            );
            for g in &p.gpus {
                out += &format!(
                    "{:<5} {:<42} {:<24} {:<18} {:>10}  {} ({}:{})\n",
                    g.index,
                    g.uuid,
                    g.name,
                    g.pci_bus_id,
                    fmt_bytes(g.memory_total_bytes),
                    g.node.path,
                    g.node.major,
                    g.node.minor
                );
            }
            if p.gpus.is_empty() {
                out += "  (none)\n";
            }
        }
        Err(e) => out += &format!("GPUs: no NVML: {e}\n"),
    }
    let devs = rdma::discover_rdma(cfg);
    out += "\nRDMA devices:\n";
    out += &format!(
        "{:<10} {:<20} {:<13} {:<5} {:<8} {:<11} {:<22} {:>6}  {:<10} NETDEVS\n",
        "DEVICE", "NODE_GUID", "PCI", "PORT", "STATE", "LINK", "RATE", "MTU", "UVERBS"
    );
    for d in &devs {
        let uverbs = d
            .uverbs
            .as_ref()
            .map_or("-".to_string(), |n| format!("{}:{}", n.major, n.minor));
        for p in &d.ports {
            out += &format!(
                "{:<10} {:<20} {:<13} {:<5} {:<8} {:<11} {:<22} {:>6}  {:<10} {}\n",
                d.name,
                d.node_guid,
                d.pci_address.as_deref().unwrap_or("-"),
                p.number,
                p.state,
                p.link_layer,
                p.rate,
                p.active_mtu.map_or("-".into(), |m| m.to_string()),
                uverbs,
                d.netdevs.join(",")
            );
        }
    }
    if devs.is_empty() {
        out += "  (none)\n";
    }
    match rdma::rdma_cm_node(cfg) {
        Some(cm) => out += &format!("rdma_cm: {} ({}:{})\n", cm.path, cm.major, cm.minor),
        None => out += "rdma_cm: absent\n",
    }
    out
}
