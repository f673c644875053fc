//! The fake host tree. Layout mirrors the kernel's: class entries are relative symlinks
//! into `devices/`, PCI functions carry `infiniband/`, `infiniband_verbs/`, `net/`.

use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use super::{FAKE_GPU_MINORS, FAKE_UVM_MAJOR, IB_MAJOR, RDMA_CM_DEV};
use crate::config::DeviceConfig;

/// A fake sysfs + dev + proc + driver-file tree under one root.
#[derive(Debug, Clone)]
pub struct FakeHost {
    pub root: PathBuf,
    pub sysfs: PathBuf,
    pub dev: PathBuf,
    pub proc_devices: PathBuf,
    pub lib_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub cdi_dir: PathBuf,
    /// Why char nodes could not be created (not root, nodev mount), if so.
    /// sysfs `dev` files still give every major:minor.
    pub mknod_error: Option<String>,
}

const PROC_DEVICES: &str = "Character devices:\n  1 mem\n  4 /dev/vc/0\n 10 misc\n195 nvidia-frontend\n231 infiniband_verbs\n509 nvidia-uvm\n510 nvidia-caps\n\nBlock devices:\n  7 loop\n  8 sd\n";

fn write(path: &Path, body: &str) -> io::Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(path, body)
}

fn link(target: &str, at: &Path) -> io::Result<()> {
    if let Some(p) = at.parent() {
        std::fs::create_dir_all(p)?;
    }
    symlink(target, at)
}

struct FakeRdma<'a> {
    name: &'a str,
    pci: &'a str,
    guid: &'a str,
    index: i64,
    link_layer: &'a str,
    state: &'a str,
    rate: &'a str,
    netdev: &'a str,
    mtu: u32,
}

const PCI_PARENT: &str = "devices/pci0000:3a/0000:3a:00.0";

impl FakeHost {
    /// Builds the tree under `root` (which must exist and be empty-ish).
    ///
    /// - mlx5_0 (0000:3b:00.0): InfiniBand, port 1 ACTIVE 100 Gb/sec, netdev ib0,
    ///   uverbs0 231:192, umad0 231:0, issm0 231:64.
    /// - mlx5_1 (0000:3b:00.1): RoCE, port 1 DOWN, netdev eth1 (MTU 9000, in gid ndevs),
    ///   uverbs1 231:193, umad1 231:1, issm1 231:65.
    /// - eth0 on 0000:00:1f.6 without RDMA; rdma_cm 10:58.
    /// - /dev/nvidia3, nvidia7 (the NVML GPUs), nvidia5 (not an NVML GPU), nvidiactl,
    ///   nvidia-modeset, nvidia-uvm(-tools) with major 509 from the fake /proc/devices.
    /// - driver files: libcuda, libnvidia-ml, libnvidia-ptxjitcompiler (default caps),
    ///   libnvidia-encode (video only), nvidia-smi, nvidia-cuda-mps-control.
    pub fn build(root: &Path) -> io::Result<FakeHost> {
        let h = FakeHost {
            root: root.to_path_buf(),
            sysfs: root.join("sys"),
            dev: root.join("dev"),
            proc_devices: root.join("proc/devices"),
            lib_dir: root.join("usr/lib/x86_64-linux-gnu"),
            bin_dir: root.join("usr/bin"),
            cdi_dir: root.join("etc/cdi"),
            mknod_error: None,
        };
        std::fs::create_dir_all(&h.cdi_dir)?;
        write(&h.proc_devices, PROC_DEVICES)?;
        let mut h = h;
        for d in [
            FakeRdma {
                name: "mlx5_0",
                pci: "0000:3b:00.0",
                guid: "0c42:a103:0065:a1b0",
                index: 0,
                link_layer: "InfiniBand",
                state: "4: ACTIVE",
                rate: "100 Gb/sec (4X EDR)",
                netdev: "ib0",
                mtu: 4092,
            },
            FakeRdma {
                name: "mlx5_1",
                pci: "0000:3b:00.1",
                guid: "0c42:a103:0065:a1b1",
                index: 1,
                link_layer: "Ethernet",
                state: "1: DOWN",
                rate: "40 Gb/sec (4X QDR)",
                netdev: "eth1",
                mtu: 9000,
            },
        ] {
            h.add_rdma(&d)?;
        }
        // A NIC without RDMA, and rdma_cm.
        let s = &h.sysfs;
        let eth0 = "devices/pci0000:00/0000:00:1f.6";
        write(&s.join(eth0).join("net/eth0/mtu"), "1500\n")?;
        link(
            "../../../0000:00:1f.6",
            &s.join(eth0).join("net/eth0/device"),
        )?;
        link(&format!("../../{eth0}/net/eth0"), &s.join("class/net/eth0"))?;
        link(
            &format!("../../../{eth0}"),
            &s.join("bus/pci/devices/0000:00:1f.6"),
        )?;
        write(
            &s.join("devices/virtual/misc/rdma_cm/dev"),
            &format!("{}:{}\n", RDMA_CM_DEV.0, RDMA_CM_DEV.1),
        )?;
        link(
            "../../devices/virtual/misc/rdma_cm",
            &s.join("class/misc/rdma_cm"),
        )?;
        h.make_node("infiniband/rdma_cm", RDMA_CM_DEV.0, RDMA_CM_DEV.1)?;

        for m in FAKE_GPU_MINORS.iter().copied().chain([5]) {
            h.make_node(&format!("nvidia{m}"), 195, i64::from(m))?;
        }
        h.make_node("nvidiactl", 195, 255)?;
        h.make_node("nvidia-modeset", 195, 254)?;
        h.make_node("nvidia-uvm", FAKE_UVM_MAJOR, 0)?;
        h.make_node("nvidia-uvm-tools", FAKE_UVM_MAJOR, 1)?;
        h.add_driver_files()?;
        Ok(h)
    }

    fn add_rdma(&mut self, d: &FakeRdma) -> io::Result<()> {
        let s = self.sysfs.clone();
        let pci_rel = format!("{PCI_PARENT}/{}", d.pci);
        let pci = s.join(&pci_rel);
        let ib = pci.join("infiniband").join(d.name);
        write(&ib.join("node_guid"), &format!("{}\n", d.guid))?;
        write(&ib.join("node_type"), "1: CA\n")?;
        link(&format!("../../../{}", d.pci), &ib.join("device"))?;
        let port = ib.join("ports/1");
        write(&port.join("state"), &format!("{}\n", d.state))?;
        write(&port.join("rate"), &format!("{}\n", d.rate))?;
        write(&port.join("link_layer"), &format!("{}\n", d.link_layer))?;
        let phys = if d.state.contains("ACTIVE") {
            "5: LinkUp"
        } else {
            "3: Disabled"
        };
        write(&port.join("phys_state"), &format!("{phys}\n"))?;
        if d.link_layer == "Ethernet" {
            write(&port.join("gid_attrs/ndevs/0"), &format!("{}\n", d.netdev))?;
            write(&port.join("gid_attrs/ndevs/1"), &format!("{}\n", d.netdev))?;
            // fe80 RoCE v1, ::ffff:192.0.2.7 RoCE v2, and an empty entry.
            write(
                &port.join("gids/0"),
                "fe80:0000:0000:0000:0200:00ff:fe00:0001\n",
            )?;
            write(
                &port.join("gids/1"),
                "0000:0000:0000:0000:0000:ffff:c000:0207\n",
            )?;
            write(
                &port.join("gids/2"),
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            )?;
            write(&port.join("gid_attrs/types/0"), "IB/RoCE v1\n")?;
            write(&port.join("gid_attrs/types/1"), "RoCE v2\n")?;
        }
        link(
            &format!("../../{pci_rel}/infiniband/{}", d.name),
            &s.join("class/infiniband").join(d.name),
        )?;
        link(
            &format!("../../../{pci_rel}"),
            &s.join("bus/pci/devices").join(d.pci),
        )?;
        // netdev
        let nd = pci.join("net").join(d.netdev);
        write(&nd.join("mtu"), &format!("{}\n", d.mtu))?;
        link(&format!("../../../{}", d.pci), &nd.join("device"))?;
        link(
            &format!("../../{pci_rel}/net/{}", d.netdev),
            &s.join("class/net").join(d.netdev),
        )?;
        // char devices: (class, entry, minor, port)
        let i = d.index;
        for (class, entry, minor) in [
            ("infiniband_verbs", format!("uverbs{i}"), 192 + i),
            ("infiniband_mad", format!("umad{i}"), i),
            ("infiniband_mad", format!("issm{i}"), 64 + i),
        ] {
            let dir = pci.join(class).join(&entry);
            write(&dir.join("ibdev"), &format!("{}\n", d.name))?;
            write(&dir.join("dev"), &format!("{IB_MAJOR}:{minor}\n"))?;
            if class == "infiniband_mad" {
                write(&dir.join("port"), "1\n")?;
            }
            link(
                &format!("../../{pci_rel}/{class}/{entry}"),
                &s.join("class").join(class).join(&entry),
            )?;
            self.make_node(&format!("infiniband/{entry}"), IB_MAJOR, minor)?;
        }
        Ok(())
    }

    fn add_driver_files(&self) -> io::Result<()> {
        let v = super::FAKE_DRIVER_VERSION;
        for lib in [
            "libcuda",
            "libnvidia-ml",
            "libnvidia-ptxjitcompiler",
            "libnvidia-encode",
        ] {
            let real = format!("{lib}.so.{v}");
            write(&self.lib_dir.join(&real), &format!("fake {real}\n"))?;
            symlink(&real, self.lib_dir.join(format!("{lib}.so.1")))?;
        }
        symlink("libcuda.so.1", self.lib_dir.join("libcuda.so"))?;
        write(&self.lib_dir.join("libunrelated.so.1"), "not nvidia\n")?;
        for bin in ["nvidia-smi", "nvidia-cuda-mps-control"] {
            write(&self.bin_dir.join(bin), "#!/bin/sh\necho fake\n")?;
        }
        Ok(())
    }

    /// Creates a char node under the dev root; the first failure is recorded, not fatal.
    fn make_node(&mut self, rel: &str, major: i64, minor: i64) -> io::Result<()> {
        let path = self.dev.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        if self.mknod_error.is_some() {
            return Ok(());
        }
        let dev = makedev(major as u64, minor as u64);
        if let Err(e) = mknod(&path, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), dev) {
            self.mknod_error = Some(format!("mknod {}: {e}", path.display()));
        }
        Ok(())
    }

    /// A config pointing at this tree; NVML points at a path that does not exist, so
    /// anything that loads NVML fails loudly.
    pub fn config(&self) -> DeviceConfig {
        DeviceConfig {
            nvml_library: self
                .root
                .join("no-nvml/libnvidia-ml.so.1")
                .display()
                .to_string(),
            sysfs_root: self.sysfs.clone(),
            dev_root: self.dev.clone(),
            cdi_spec_dirs: vec![self.cdi_dir.clone(), self.root.join("var/run/cdi")],
            proc_devices: self.proc_devices.clone(),
            host_lib_dirs: vec![self.lib_dir.clone()],
            host_bin_dirs: vec![self.bin_dir.clone()],
        }
    }

    /// `config()` with NVML loaded from `lib` (e.g. from `build_fake_nvml`).
    pub fn config_with_nvml(&self, lib: &Path) -> DeviceConfig {
        DeviceConfig {
            nvml_library: lib.display().to_string(),
            ..self.config()
        }
    }
}
