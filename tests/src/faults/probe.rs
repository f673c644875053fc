//! What the fault and soak tests measure on the host: a process's fds, threads and memory,
//! dying memcgs, files under a state dir, user namespace leases, this instance's shims.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::containerd::Containerd;
use crate::leaks::owned_processes;

/// Number of open fds of `pid` (`None` once it is gone).
pub fn fd_count(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|rd| rd.count())
}

/// `pid`'s fds by kind: `anon_inode:[eventfd]`, `anon_inode:inotify`, `socket`, `pipe`, or
/// the path for files.
pub fn fd_kinds(pid: u32) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(t) = std::fs::read_link(e.path()) else {
            continue;
        };
        let t = t.display().to_string();
        let kind = if t.starts_with("socket:") {
            "socket".to_owned()
        } else if t.starts_with("pipe:") {
            "pipe".to_owned()
        } else {
            t
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

/// OOM watcher fds of `pid`: eventfds (cgroup v1) and inotify instances (v2).
pub fn watcher_fds(pid: u32) -> usize {
    fd_kinds(pid)
        .iter()
        .filter(|(k, _)| k.contains("eventfd") || k.contains("inotify"))
        .map(|(_, n)| n)
        .sum()
}

/// Threads of `pid` (tokio tasks are not visible; blocking threads are).
pub fn thread_count(pid: u32) -> Option<usize> {
    status_field(pid, "Threads:")
}

/// Resident memory of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<usize> {
    status_field(pid, "VmRSS:")
}

fn status_field(pid: u32, key: &str) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Dying memory cgroups on this host: on v1, memory's `num_cgroups` in /proc/cgroups minus the
/// directories in its tree; on v2, `nr_dying_descendants` of the root.
pub fn dying_memcgs() -> Option<i64> {
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("cgroup.procs").exists() {
        let cgroups = std::fs::read_to_string("/proc/cgroups").ok()?;
        let total: i64 = cgroups.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"memory")).then(|| f.get(2)?.parse().ok())?
        })?;
        return Some(total - count_dirs(v1) as i64);
    }
    let stat = std::fs::read_to_string("/sys/fs/cgroup/cgroup.stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_dying_descendants "))
        .and_then(|v| v.trim().parse().ok())
}

/// Directories in a tree, the root included.
fn count_dirs(root: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        n += 1;
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    n
}

/// Every file (not directory) under `dirs`, as paths.
pub fn files_under(dirs: &[PathBuf]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(_) => {
                    out.insert(e.path().display().to_string());
                }
                Err(_) => {}
            }
        }
    }
    out
}

/// Sandbox ids holding a lease in rund's state dir `state` (`<state>/userns/leases.json`).
pub fn leases(state: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(state.join("userns/leases.json")) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["leases"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["sandbox_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Pids of this instance's shims (`containerd-shim*` in argv[0]).
pub fn shim_pids(ctd: &Containerd) -> Vec<u32> {
    crate::leaks::shim_processes(ctd)
        .into_iter()
        .map(|p| p.pid)
        .collect()
}

/// The running shim whose argv names `-id <id>` (the pod's first container).
pub fn shim_of(ctd: &Containerd, id: &str) -> Option<u32> {
    let needle = format!("-id {id} ");
    owned_processes(&ctd.watch_prefixes(), &ctd.cgroup_roots(), ctd.pid())
        .into_iter()
        .find(|p| p.comm.starts_with("containerd-shim") && p.cmdline.contains(&needle))
        .map(|p| p.pid)
}

/// Waits until the pod's agent (the shim's `rund-agent` child) is in the
/// pod sandbox's cgroup on every hierarchy: the shim moves it there after
/// RunPodSandbox has answered. False if it is not within `limit`.
pub fn agent_placed(shim: u32, pod_id: &str, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let placed = crate::pernode::children_named(shim, "rund-agent")
            .first()
            .and_then(|a| std::fs::read_to_string(format!("/proc/{a}/cgroup")).ok())
            .is_some_and(|t| {
                t.lines()
                    .filter(|l| !l.ends_with(":/"))
                    .all(|l| l.contains(pod_id))
            });
        if placed || std::time::Instant::now() > deadline {
            return placed;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The nearest ancestor of `pid` (itself excluded) whose comm is `comm` (the agent's exe
/// link is useless: it pivoted into a root of its own).
pub fn ancestor_named(pid: u32, comm: &str) -> Option<u32> {
    let mut p = crate::ocispec::parent_pid(pid)?;
    while p > 1 {
        let name = std::fs::read_to_string(format!("/proc/{p}/comm")).ok()?;
        if name.trim_end() == comm {
            return Some(p);
        }
        p = crate::ocispec::parent_pid(p)?;
    }
    None
}

/// `pid`'s RLIMIT_NOFILE (soft, hard).
pub fn nofile(pid: u32) -> (u64, u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads the limit into a valid struct; no new value is set.
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(r, 0, "prlimit {pid}: {}", std::io::Error::last_os_error());
    (old.rlim_cur, old.rlim_max)
}

/// Sets `pid`'s soft RLIMIT_NOFILE (the hard one cannot go back up here: no
/// CAP_SYS_RESOURCE).
pub fn set_soft_nofile(pid: u32, soft: u64) {
    let rl = libc::rlimit {
        rlim_cur: soft,
        rlim_max: nofile(pid).1,
    };
    // SAFETY: prlimit with a valid rlimit struct and no old-value pointer.
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &rl,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0, "prlimit {pid}: {}", std::io::Error::last_os_error());
}

/// The socket of the shim serving task `id` (from its bundle's `address` file).
pub fn shim_socket(ctd: &Containerd, id: &str) -> Option<PathBuf> {
    let bundle = ctd
        .layout
        .state
        .join("io.containerd.runtime.v2.task")
        .join(&ctd.namespace)
        .join(id);
    let address = std::fs::read_to_string(bundle.join("address")).ok()?;
    Some(PathBuf::from(address.trim().trim_start_matches("unix://")))
}
