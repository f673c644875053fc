//! The agent's tables: containers, their processes and namespace fds.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use nix::unistd::Pid;
use oci_spec::runtime::LinuxSeccomp;

use crate::reaper::ExitRx;

pub struct Proc {
    pub pid: Pid,
    pub exit: ExitRx,
    /// The set-up channel; the start byte goes here. `None` once started.
    pub sync: Option<OwnedFd>,
}

impl Proc {
    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

pub struct Container {
    pub init: Proc,
    pub execs: HashMap<String, Proc>,
    /// The init's namespaces (join order), opened when it reported ready.
    pub ns: Vec<(String, OwnedFd)>,
    /// The container has a pid namespace of its own: its inode.
    pub pidns: Option<u64>,
    /// Applied to exec processes too.
    pub seccomp: Option<LinuxSeccomp>,
}

#[derive(Default)]
pub struct State {
    pub containers: HashMap<String, Container>,
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
    let all: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if let Some(ino) = c.pidns {
        return all
            .into_iter()
            .filter(|p| ns_inode(*p, "pid") == Some(ino))
            .collect();
    }
    let parents: HashMap<i32, i32> = all.iter().filter_map(|p| Some((*p, ppid(*p)?))).collect();
    let mut members = vec![c.init.pid.as_raw()];
    members.extend(c.execs.values().map(|e| e.pid.as_raw()));
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
    members.retain(|p| all.contains(p));
    members
}

fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The comm field may hold spaces and parens: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}
