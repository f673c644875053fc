//! A CNI network for CRI pods with their own network namespace, kept off the host.
//!
//! containerd runs inside a network namespace this harness creates (only containerd: the test
//! process and the mount namespace stay the host's), so the CNI bridge, its address and every
//! pod's veth peer live in that namespace and go away with it. Each instance gets its own /24, so
//! a pod network namespace left in `/run/netns` can be attributed to the instance that made it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sched::CloneFlags;

use crate::bins::host_tool;
use crate::cmd;
use crate::error::{Error, IoContext, Result};

/// Where containerd 1.6 bind-mounts the pod network namespaces it creates.
const NETNS_DIR: &str = "/run/netns";
/// The conflist's network name (CNI's cache is keyed by it).
pub const NETWORK_NAME: &str = "rit-pods";
/// The bridge inside the instance's network namespace.
pub const BRIDGE: &str = "rit0";

/// A network namespace with loopback up, the CNI conflist that uses it, and the IPAM state dir.
#[derive(Debug)]
pub struct PodNetwork {
    netns: OwnedFd,
    /// The pods' subnet, `10.<a>.<b>.0/24`.
    pub subnet: String,
    /// `10.<a>.<b>.`: the subnet's prefix, for matching addresses.
    prefix: String,
}

impl PodNetwork {
    /// A new network namespace for the instance `suffix`, with a bridge + host-local conflist
    /// written to `cni_conf` and IPAM state under `dir`.
    pub fn create(dir: &Path, cni_conf: &Path, suffix: &str) -> Result<PodNetwork> {
        let netns = std::thread::spawn(new_netns_with_lo)
            .join()
            .map_err(|_| Error::Parse {
                cmd: "create network namespace".into(),
                detail: "thread panicked".into(),
            })??;
        // A per-instance /24 (not 10.88/16, a common default) keeps leftovers attributable.
        let h = suffix
            .bytes()
            .fold(5381u32, |h, b| h.wrapping_mul(33) ^ u32::from(b));
        let prefix = format!("10.{}.{}.", 100 + (h >> 8) % 100, h & 0xff);
        let me = PodNetwork {
            netns,
            subnet: format!("{prefix}0/24"),
            prefix,
        };
        std::fs::create_dir_all(cni_conf).ctx("create CNI conf dir", cni_conf)?;
        let conf = cni_conf.join("10-rit.conflist");
        std::fs::write(&conf, me.conflist(&dir.join("cni-ipam"))).ctx("write conflist", &conf)?;
        Ok(me)
    }

    /// The conflist: a bridge (gateway inside the namespace, no masquerade, so no iptables) with
    /// host-local IPAM. containerd's CRI adds loopback itself.
    fn conflist(&self, ipam_dir: &Path) -> String {
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": NETWORK_NAME,
            "plugins": [{
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": ipam_dir,
                    "ranges": [[{ "subnet": self.subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                },
            }],
        })
        .to_string()
    }

    /// Whether `ip` is one of this network's pod addresses.
    pub fn contains(&self, ip: &str) -> bool {
        ip.starts_with(&self.prefix)
    }

    /// Make `cmd` start inside the namespace (its mount namespace stays the caller's).
    pub fn enter_on_exec(&self, cmd: &mut Command) {
        let fd = self.netns.as_raw_fd();
        // SAFETY: the closure only calls setns(2), which is async-signal-safe, on an fd this
        // process keeps open (it is CLOEXEC, so still open in the child before exec).
        unsafe {
            cmd.pre_exec(move || {
                // SAFETY: `fd` stays open until exec (see above).
                let ns = std::os::fd::BorrowedFd::borrow_raw(fd);
                nix::sched::setns(ns, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
            });
        }
    }

    /// Pod network namespaces in `/run/netns` that hold an address of this network.
    pub fn pod_netns(&self) -> Vec<PathBuf> {
        let Some(ip) = host_tool("ip") else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("cni-") {
                continue;
            }
            let mut c = Command::new(&ip);
            c.args(["-n", &name, "-o", "-4", "addr", "show"]);
            let Ok(out_) = cmd::run(c, None, Duration::from_secs(10)) else {
                continue;
            };
            let ours = out_
                .stdout
                .split_whitespace()
                .any(|w| w.split('/').next().is_some_and(|a| self.contains(a)));
            if ours {
                out.push(e.path());
            }
        }
        out
    }

    /// Unmount and remove [`PodNetwork::pod_netns`] (pods a failed test never removed). Call
    /// after containerd and its shims are gone.
    pub fn remove_leftover_pod_netns(&self) {
        for path in self.pod_netns() {
            let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(&path);
        }
    }

    /// The namespace, e.g. to run a node-side probe in it with setns.
    pub fn netns(&self) -> std::os::fd::BorrowedFd<'_> {
        self.netns.as_fd()
    }
}

/// Runs on a throw-away thread: network namespaces are per thread, so the caller's stays put.
fn new_netns_with_lo() -> Result<OwnedFd> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(|e| Error::Io {
        what: "unshare(CLONE_NEWNET)",
        path: "/proc/thread-self/ns/net".into(),
        source: e.into(),
    })?;
    let ns: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")
        .ctx("open network namespace", "/proc/thread-self/ns/net")?
        .into();
    let ip = host_tool("ip").ok_or_else(|| Error::ToolMissing("ip (iproute2)".into()))?;
    // A child forked from this thread starts in its network namespace.
    let mut c = Command::new(ip);
    c.args(["link", "set", "lo", "up"]);
    cmd::run(c, None, Duration::from_secs(10))?.check()?;
    Ok(ns)
}
