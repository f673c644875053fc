use std::path::Path;

use rund_devices::rdma::{discover_rdma, rdma_cm_node, rdma_for_netdev};
use rund_devices::testutil::{IB_MAJOR, RDMA_CM_DEV};

use crate::host;

#[test]
fn two_mlx5_devices_with_ports_nodes_and_netdevs() {
    let (_t, h) = host();
    let cfg = h.config();
    let devs = discover_rdma(&cfg);
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);

    let d0 = &devs[0];
    assert_eq!(d0.node_guid, "0c42:a103:0065:a1b0");
    assert_eq!(d0.pci_address.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(d0.ports.len(), 1);
    let p = &d0.ports[0];
    assert_eq!(
        (p.number, p.state.as_str(), p.link_layer.as_str()),
        (1, "ACTIVE", "InfiniBand")
    );
    assert_eq!(p.rate, "100 Gb/sec (4X EDR)");
    assert!(p.is_active());
    assert_eq!(p.active_mtu, None, "sysfs has no IB MTU");
    let uv = d0.uverbs.as_ref().unwrap();
    assert_eq!(uv.path, "/dev/infiniband/uverbs0");
    assert_eq!((uv.major, uv.minor), (IB_MAJOR, 192));
    assert_eq!(uv.host_path, h.dev.join("infiniband/uverbs0"));
    assert_eq!(d0.umad[0].path, "/dev/infiniband/umad0");
    assert_eq!((d0.umad[0].major, d0.umad[0].minor), (IB_MAJOR, 0));
    assert_eq!((d0.issm[0].major, d0.issm[0].minor), (IB_MAJOR, 64));
    assert_eq!(d0.netdevs, ["ib0"]);

    let d1 = &devs[1];
    let p = &d1.ports[0];
    assert_eq!(p.state, "DOWN", "the one port that is down");
    assert!(!p.is_active());
    assert_eq!(p.link_layer, "Ethernet");
    assert_eq!(p.gid_ndevs, ["eth1"]);
    assert_eq!(p.active_mtu, Some(4096), "RoCE MTU from netdev MTU 9000");
    let gids: Vec<_> = p
        .gids
        .iter()
        .map(|g| {
            (
                g.index,
                g.gid_type.as_deref(),
                g.ndev.as_deref(),
                g.ipv4.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        gids,
        [
            (0, Some("IB/RoCE v1"), Some("eth1"), None),
            (1, Some("RoCE v2"), Some("eth1"), Some("192.0.2.7")),
        ],
        "the empty entry 2 is left out"
    );
    assert!(d0.ports[0].gids.is_empty(), "no gids/ in the IB double");
    assert_eq!(d1.uverbs.as_ref().unwrap().minor, 193);
    assert_eq!(d1.netdevs, ["eth1"]);

    let cm = rdma_cm_node(&cfg).unwrap();
    assert_eq!((cm.major, cm.minor), RDMA_CM_DEV);
}

#[test]
fn netdev_mapping_both_ways() {
    let (_t, h) = host();
    let cfg = h.config();
    let devs = discover_rdma(&cfg);
    assert_eq!(rdma_for_netdev(&cfg, &devs, "eth1"), ["mlx5_1"]);
    assert_eq!(rdma_for_netdev(&cfg, &devs, "ib0"), ["mlx5_0"]);
    assert!(
        rdma_for_netdev(&cfg, &devs, "eth0").is_empty(),
        "eth0 has no RDMA"
    );
    assert!(rdma_for_netdev(&cfg, &devs, "nope").is_empty());

    // RoCE over a netdev that is not the PCI function's own (e.g. a bond): gid ndevs only.
    let ndev = h
        .sysfs
        .join("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/2");
    std::fs::write(ndev, "bond0\n").unwrap();
    let devs = discover_rdma(&cfg);
    assert_eq!(rdma_for_netdev(&cfg, &devs, "bond0"), ["mlx5_1"]);
}

#[test]
fn dev_numbers_fall_back_to_the_node() {
    let (_t, h) = host();
    if let Some(e) = &h.mknod_error {
        rund_skip::skip!("{e}");
    }
    let cfg = h.config();
    let dev_file = h.sysfs.join("class/infiniband_verbs/uverbs1/dev");
    std::fs::remove_file(&dev_file).unwrap();
    let devs = discover_rdma(&cfg);
    let uv = devs[1]
        .uverbs
        .as_ref()
        .expect("uverbs1 found through its node");
    assert_eq!((uv.major, uv.minor), (IB_MAJOR, 193));

    // Neither sysfs nor node: the entry is dropped rather than invented.
    std::fs::remove_file(h.dev.join("infiniband/uverbs1")).unwrap();
    assert!(discover_rdma(&cfg)[1].uverbs.is_none());
}

#[test]
fn no_sysfs_means_no_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = rund_devices::DeviceConfig {
        sysfs_root: tmp.path().join("sys"),
        dev_root: tmp.path().join("dev"),
        ..Default::default()
    };
    assert!(discover_rdma(&cfg).is_empty());
    assert!(rdma_cm_node(&cfg).is_none());
    assert!(
        !Path::new(&tmp.path().join("sys")).exists(),
        "nothing created"
    );
}
