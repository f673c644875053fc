//! The fds of one CreateProcess, sorted by what they are for.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rund_proto::fdpass::FdKind;

#[derive(Default)]
pub struct PassedFds {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    pub console: Option<OwnedFd>,
    pub rootfs: Option<OwnedFd>,
    pub mounts: HashMap<usize, OwnedFd>,
    pub namespaces: HashMap<String, OwnedFd>,
    pub devices: HashMap<String, OwnedFd>,
    /// The parent's, for clone3: taken out before the fork.
    pub cgroup: Option<OwnedFd>,
    /// The parent's, for a birth in a v1 cgroup: taken out before the fork.
    pub cgroup_tasks: Vec<OwnedFd>,
}

impl PassedFds {
    pub fn new(kinds: Vec<FdKind>, fds: Vec<OwnedFd>) -> Self {
        let mut p = PassedFds::default();
        for (k, fd) in kinds.into_iter().zip(fds) {
            match k {
                FdKind::Stdin => p.stdin = Some(fd),
                FdKind::Stdout => p.stdout = Some(fd),
                FdKind::Stderr => p.stderr = Some(fd),
                FdKind::Console => p.console = Some(fd),
                FdKind::Rootfs => p.rootfs = Some(fd),
                FdKind::Mount(i) => {
                    p.mounts.insert(i, fd);
                }
                FdKind::Namespace(n) => {
                    p.namespaces.insert(n, fd);
                }
                FdKind::Device(path) => {
                    p.devices.insert(path, fd);
                }
                FdKind::Cgroup => p.cgroup = Some(fd),
                FdKind::CgroupTasks => p.cgroup_tasks.push(fd),
                // Only ever alone in its batch, and routed before filing.
                FdKind::Conn => drop(fd),
            }
        }
        p
    }

    /// Every raw fd held (to keep them open in the child).
    pub fn raw(&self) -> Vec<RawFd> {
        let singles = [
            &self.stdin,
            &self.stdout,
            &self.stderr,
            &self.console,
            &self.rootfs,
        ];
        let mut v: Vec<RawFd> = singles
            .iter()
            .filter_map(|f| f.as_ref().map(|f| f.as_raw_fd()))
            .collect();
        v.extend(self.mounts.values().map(|f| f.as_raw_fd()));
        v.extend(self.namespaces.values().map(|f| f.as_raw_fd()));
        v.extend(self.devices.values().map(|f| f.as_raw_fd()));
        v
    }
}
