//! The agent's tables: containers, their processes and namespace fds.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;

use nix::unistd::Pid;
use oci_spec::runtime::LinuxSeccomp;

use crate::reaper::ExitRx;

pub struct Proc {
    pub pid: Pid,
    pub exit: ExitRx,
    /// The set-up channel; the start byte goes here. `None` once started.
    pub sync: Option<OwnedFd>,
    /// PID 1 of a pid namespace of its own, with no rund-init: the kernel
    /// drops signals it has no handler for, so rund decides by disposition.
    pub ns_init: bool,
    /// The signal whose default action rund carried out with SIGKILL: the
    /// exit is reported as death by that signal.
    pub killed_for: Option<i32>,
}

impl Proc {
    pub fn new(pid: Pid, exit: ExitRx, sync: Option<OwnedFd>) -> Self {
        Proc {
            pid,
            exit,
            sync,
            ns_init: false,
            killed_for: None,
        }
    }

    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

pub struct Container {
    pub init: Proc,
    pub execs: HashMap<String, Proc>,
    /// Exec ids reserved while their process is being set up.
    pub starting_execs: HashSet<String>,
    /// The init's namespaces (join order), opened when it reported ready.
    pub ns: Vec<(String, OwnedFd)>,
    /// The container has a pid namespace of its own: its inode.
    pub pidns: Option<u64>,
    /// Applied to exec processes too.
    pub seccomp: Option<LinuxSeccomp>,
    /// Set-up stopped before pivot_root, until resumed.
    pub paused: bool,
}

#[derive(Default)]
pub struct State {
    pub containers: HashMap<String, Container>,
    /// Container ids reserved while their init is being set up.
    pub starting: HashSet<String>,
}

impl State {
    pub fn proc(&self, id: &str, exec_id: &str) -> Option<&Proc> {
        let c = self.containers.get(id)?;
        if exec_id.is_empty() {
            Some(&c.init)
        } else {
            c.execs.get(exec_id)
        }
    }

    pub fn proc_mut(&mut self, id: &str, exec_id: &str) -> Option<&mut Proc> {
        let c = self.containers.get_mut(id)?;
        if exec_id.is_empty() {
            Some(&mut c.init)
        } else {
            c.execs.get_mut(exec_id)
        }
    }
}

/// The inode of /proc/<pid>/ns/<name>.
pub fn ns_inode(pid: i32, name: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{name}"))
        .ok()
        .map(|m| m.ino())
}

/// Every pid (agent namespace) that belongs to a container: the members of
/// its pid namespace, or else the init and its descendants.
pub fn container_pids(c: &Container) -> Vec<i32> {
    if let Some(ino) = c.pidns {
        return all_pids()
            .into_iter()
            .filter(|p| ns_inode(*p, "pid") == Some(ino))
            .collect();
    }
    let mut roots = vec![c.init.pid.as_raw()];
    roots.extend(c.execs.values().map(|e| e.pid.as_raw()));
    tree(&roots, true)
}

/// Every live descendant of `pid` (not `pid` itself).
pub fn descendants(pid: i32) -> Vec<i32> {
    tree(&[pid], false)
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes under `roots` by parent pid; the roots too if `with_roots`.
fn tree(roots: &[i32], with_roots: bool) -> Vec<i32> {
    let all = all_pids();
    let parents: HashMap<i32, i32> = all.iter().filter_map(|p| Some((*p, ppid(*p)?))).collect();
    let mut members: Vec<i32> = roots.to_vec();
    let mut changed = true;
    while changed {
        changed = false;
        for (p, pp) in &parents {
            if members.contains(pp) && !members.contains(p) {
                members.push(*p);
                changed = true;
            }
        }
    }
    members.retain(|p| all.contains(p) && (with_roots || !roots.contains(p)));
    members
}

fn ppid(pid: i32) -> Option<i32> {
    rund_sys::procfs::stat(pid).map(|s| s.ppid)
}
