//! The sysfs walk. Missing attributes degrade to empty values: sysfs differs between drivers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{RdmaDevice, RdmaGid, RdmaPort};
use crate::config::DeviceConfig;
use crate::devnode::{dev_numbers, DeviceNode};

const RDMA_MODE: u32 = 0o666;

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Sorted entry names of a directory; empty if it does not exist.
fn list_dir(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|a| natural_key(a));
    names
}

/// Sorts `uverbs10` after `uverbs2`.
fn natural_key(s: &str) -> (String, u64) {
    let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = s.split_at(s.len() - digits);
    (head.to_string(), tail.parse().unwrap_or(0))
}

/// `/sys/.../device` → `0000:3b:00.0` when the link points at a PCI function.
fn pci_address_of(device_link: &Path) -> Option<String> {
    let target = std::fs::canonicalize(device_link).ok()?;
    let name = target.file_name()?.to_str()?.to_string();
    let looks_pci = name.matches(':').count() == 2 && name.contains('.');
    looks_pci.then_some(name)
}

/// The IB MTU the kernel picks for a RoCE netdev MTU (`iboe_get_mtu`): the MTU minus
/// GRH+UDP+BTH+XRC+AtomicETH+ICRC headers (96 bytes), rounded down to an IB MTU.
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let payload = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| payload >= m)
}

/// A `class/infiniband_verbs` or `class/infiniband_mad` entry.
struct CharEntry {
    name: String,
    ibdev: String,
    port: u32,
    sysfs_dev: PathBuf,
}

fn char_entries(class_dir: &Path) -> Vec<CharEntry> {
    list_dir(class_dir)
        .into_iter()
        .filter_map(|name| {
            let dir = class_dir.join(&name);
            let ibdev = read_trim(&dir.join("ibdev"))?;
            let port = read_trim(&dir.join("port"))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            Some(CharEntry {
                name,
                ibdev,
                port,
                sysfs_dev: dir.join("dev"),
            })
        })
        .collect()
}

fn char_node(cfg: &DeviceConfig, e: &CharEntry) -> Option<DeviceNode> {
    let path = format!("/dev/infiniband/{}", e.name);
    let host_path = cfg.host_dev_path(&path);
    match dev_numbers(&e.sysfs_dev, &host_path) {
        Ok((major, minor)) => Some(DeviceNode {
            path,
            host_path,
            major,
            minor,
            file_mode: RDMA_MODE,
        }),
        Err(err) => {
            tracing::warn!(%err, entry = %e.name, "skipping RDMA char device");
            None
        }
    }
}

/// `::ffff:a.b.c.d` from sysfs's eight colon-separated groups.
fn ipv4_of(gid: &str) -> Option<String> {
    let g: Vec<u16> = gid
        .split(':')
        .map(|x| u16::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    if g.len() != 8 || g[..5] != [0; 5] || g[5] != 0xffff {
        return None;
    }
    let [a, b] = g[6].to_be_bytes();
    let [c, d] = g[7].to_be_bytes();
    Some(format!("{a}.{b}.{c}.{d}"))
}

/// The populated entries of a port's GID table (empty ones read as all zeros).
pub fn read_gids(port_dir: &Path) -> Vec<RdmaGid> {
    let mut idx: Vec<u32> = list_dir(&port_dir.join("gids"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    idx.sort_unstable();
    idx.into_iter()
        .filter_map(|index| {
            let gid = read_trim(&port_dir.join("gids").join(index.to_string()))?;
            if gid.chars().all(|c| c == '0' || c == ':') {
                return None;
            }
            let attr = |kind: &str| {
                read_trim(
                    &port_dir
                        .join("gid_attrs")
                        .join(kind)
                        .join(index.to_string()),
                )
                .filter(|s| !s.is_empty())
            };
            Some(RdmaGid {
                index,
                ipv4: ipv4_of(&gid),
                gid,
                gid_type: attr("types"),
                ndev: attr("ndevs"),
            })
        })
        .collect()
}

fn read_port(cfg: &DeviceConfig, dir: &Path, number: u32) -> RdmaPort {
    let state = read_trim(&dir.join("state")).unwrap_or_default();
    // "4: ACTIVE" → "ACTIVE".
    let state = state
        .split_once(':')
        .map(|(_, s)| s.trim().to_string())
        .unwrap_or(state);
    let mut gid_ndevs = Vec::new();
    for entry in list_dir(&dir.join("gid_attrs/ndevs")) {
        if let Some(nd) = read_trim(&dir.join("gid_attrs/ndevs").join(entry)) {
            if !nd.is_empty() && !gid_ndevs.contains(&nd) {
                gid_ndevs.push(nd);
            }
        }
    }
    let link_layer = read_trim(&dir.join("link_layer")).unwrap_or_default();
    let active_mtu = if link_layer == "Ethernet" {
        gid_ndevs.first().and_then(|nd| {
            read_trim(&cfg.sysfs_root.join("class/net").join(nd).join("mtu"))
                .and_then(|m| m.parse().ok())
                .and_then(roce_active_mtu)
        })
    } else {
        None
    };
    RdmaPort {
        number,
        state,
        rate: read_trim(&dir.join("rate")).unwrap_or_default(),
        link_layer,
        gid_ndevs,
        gids: read_gids(dir),
        active_mtu,
    }
}

/// Walks sysfs for RDMA devices. A host without `/sys/class/infiniband` has none.
pub fn discover_rdma(cfg: &DeviceConfig) -> Vec<RdmaDevice> {
    let class = cfg.sysfs_root.join("class/infiniband");
    let verbs = char_entries(&cfg.sysfs_root.join("class/infiniband_verbs"));
    let mads = char_entries(&cfg.sysfs_root.join("class/infiniband_mad"));
    list_dir(&class)
        .into_iter()
        .map(|name| {
            let dir = class.join(&name);
            let ports: Vec<RdmaPort> = list_dir(&dir.join("ports"))
                .into_iter()
                .filter_map(|p| p.parse::<u32>().ok())
                .map(|n| read_port(cfg, &dir.join("ports").join(n.to_string()), n))
                .collect();
            let uverbs = verbs
                .iter()
                .find(|e| e.ibdev == name && e.name.starts_with("uverbs"))
                .and_then(|e| char_node(cfg, e));
            let mut mad: Vec<&CharEntry> = mads.iter().filter(|e| e.ibdev == name).collect();
            mad.sort_by_key(|e| e.port);
            let pick = |prefix: &str| -> Vec<DeviceNode> {
                mad.iter()
                    .filter(|e| e.name.starts_with(prefix))
                    .filter_map(|e| char_node(cfg, e))
                    .collect()
            };
            let mut netdevs: BTreeSet<String> =
                list_dir(&dir.join("device/net")).into_iter().collect();
            netdevs.extend(ports.iter().flat_map(|p| p.gid_ndevs.iter().cloned()));
            RdmaDevice {
                node_guid: read_trim(&dir.join("node_guid")).unwrap_or_default(),
                pci_address: pci_address_of(&dir.join("device")),
                ports,
                uverbs,
                umad: pick("umad"),
                issm: pick("issm"),
                netdevs: netdevs.into_iter().collect(),
                name,
            }
        })
        .collect()
}

/// RDMA devices behind a netdev: via its PCI function's `infiniband/` dir, then RoCE ndevs.
pub fn rdma_for_netdev(cfg: &DeviceConfig, devices: &[RdmaDevice], netdev: &str) -> Vec<String> {
    let link = cfg.sysfs_root.join("class/net").join(netdev).join("device");
    let mut names: Vec<String> = match pci_address_of(&link) {
        Some(pci) => list_dir(
            &cfg.sysfs_root
                .join("bus/pci/devices")
                .join(pci)
                .join("infiniband"),
        ),
        None => Vec::new(),
    };
    for d in devices {
        if d.netdevs.iter().any(|n| n == netdev) && !names.contains(&d.name) {
            names.push(d.name.clone());
        }
    }
    names.retain(|n| devices.iter().any(|d| &d.name == n));
    names
}

/// `/dev/infiniband/rdma_cm` (a misc device with a dynamic minor).
pub fn rdma_cm_node(cfg: &DeviceConfig) -> Option<DeviceNode> {
    let path = "/dev/infiniband/rdma_cm".to_string();
    let host_path = cfg.host_dev_path(&path);
    let sysfs_dev = cfg.sysfs_root.join("class/misc/rdma_cm/dev");
    let (major, minor) = dev_numbers(&sysfs_dev, &host_path).ok()?;
    Some(DeviceNode {
        path,
        host_path,
        major,
        minor,
        file_mode: RDMA_MODE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_matches_kernel_rounding() {
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(4191), Some(2048));
        assert_eq!(roce_active_mtu(300), None);
    }

    #[test]
    fn natural_sort() {
        let mut v = vec!["uverbs10", "uverbs2", "issm0"];
        v.sort_by_key(|a| natural_key(a));
        assert_eq!(v, ["issm0", "uverbs2", "uverbs10"]);
    }
}
