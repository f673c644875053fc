//! RDMA devices from sysfs: `/sys/class/infiniband`, `infiniband_verbs`, `infiniband_mad`.

mod scan;

use serde::{Deserialize, Serialize};

use crate::devnode::DeviceNode;

pub use scan::{discover_rdma, rdma_cm_node, rdma_for_netdev, read_gids, roce_active_mtu};

/// One port of an RDMA device (`ports/<n>/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    pub number: u32,
    /// e.g. `ACTIVE` (the text after `4: `).
    pub state: String,
    /// e.g. `100 Gb/sec (4X EDR)`.
    pub rate: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// Netdevs from `gid_attrs/ndevs/*` (RoCE).
    pub gid_ndevs: Vec<String>,
    /// The populated GID table entries (`gids/<i>`), RoCE ports especially.
    #[serde(default)]
    pub gids: Vec<RdmaGid>,
    /// Active MTU in bytes. sysfs has no IB MTU: known only for RoCE, derived from the netdev MTU.
    pub active_mtu: Option<u32>,
}

impl RdmaPort {
    /// True when the port state is ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state == "ACTIVE"
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaGid {
    pub index: u32,
    /// As sysfs prints it, e.g. `0000:0000:0000:0000:0000:ffff:0a63:0001`.
    pub gid: String,
    /// `IB/RoCE v1` or `RoCE v2` (`gid_attrs/types/<i>`), if the kernel says.
    pub gid_type: Option<String>,
    /// The netdev of a RoCE GID (`gid_attrs/ndevs/<i>`).
    pub ndev: Option<String>,
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub ipv4: Option<String>,
}

/// One RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaDevice {
    /// e.g. `mlx5_0`.
    pub name: String,
    pub node_guid: String,
    /// PCI address, e.g. `0000:3b:00.0`, if the device sits on PCI.
    pub pci_address: Option<String>,
    pub ports: Vec<RdmaPort>,
    /// `/dev/infiniband/uverbsN`.
    pub uverbs: Option<DeviceNode>,
    /// `/dev/infiniband/umadN`, one per port.
    pub umad: Vec<DeviceNode>,
    /// `/dev/infiniband/issmN`, one per port.
    pub issm: Vec<DeviceNode>,
    /// Netdevs of the device: the PCI function's `net/` plus RoCE gid ndevs.
    pub netdevs: Vec<String>,
}

impl RdmaDevice {
    /// All char device nodes of this device (uverbs, umad, issm).
    pub fn nodes(&self) -> impl Iterator<Item = &DeviceNode> {
        self.uverbs.iter().chain(&self.umad).chain(&self.issm)
    }
}
