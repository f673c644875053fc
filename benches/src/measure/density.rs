//! Per-pod memory: the shim found as the nearest `containerd-shim*` ancestor
//! of each task pid (containerd-stress density does the same with the
//! parent), plus, for rund, every other descendant of the shim that is not
//! the workload (the agent, its direct child, and the container inits).
//! Each shim is weighed once, and the sum is shared by the pods found: with
//! rund's per-node mode one shim serves them all, and its keeper (the node
//! shim's parent, `rund-keeper`) is weighed as part of the shim.

use std::collections::BTreeSet;
use std::path::Path;

use crate::procfs;
use crate::results::Density;

pub fn measure(task_pids: &[u32], workload_binary: &Path) -> Density {
    let workload = procfs::file_identity(workload_binary);
    let mut shims = BTreeSet::new();
    let mut d = Density::default();
    for &pid in task_pids {
        match procfs::shim_of(pid) {
            Some(s) => {
                shims.insert(s);
                d.pods += 1;
            }
            None => d.unresolved += 1,
        }
    }
    let keepers: BTreeSet<u32> = shims
        .iter()
        .filter_map(|&s| procfs::ppid_of(s))
        .filter(|&p| procfs::comm_of(p).as_deref() == Some("rund-keeper") && !shims.contains(&p))
        .collect();
    for &keeper in &keepers {
        if let Some(m) = procfs::mem_of(keeper) {
            d.shim_processes += 1;
            d.shim_total += m;
            d.shim_threads += procfs::threads_of(keeper).unwrap_or(0);
        }
    }
    let children = procfs::children_map();
    for &shim in &shims {
        let Some(m) = procfs::mem_of(shim) else {
            d.unresolved += 1;
            continue;
        };
        d.shim_processes += 1;
        d.shim_total += m;
        d.shim_threads += procfs::threads_of(shim).unwrap_or(0);
        let direct = children.get(&shim).cloned().unwrap_or_default();
        for p in procfs::descendants(shim, &children) {
            let id = procfs::exe_identity(p);
            if id.is_some() && id == workload {
                continue;
            }
            if let Some(m) = procfs::mem_of(p) {
                d.infra_processes += 1;
                d.infra_total += m;
                // rund's agent is the shim's child; the inits sit below it.
                if direct.contains(&p) {
                    d.agent_processes += 1;
                    d.agent_total += m;
                }
            }
        }
    }
    d
}
