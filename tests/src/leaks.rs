//! Leak detection: what one containerd instance (and the shims, agents and containers it started)
//! has on the host. Take a snapshot before, one after, and diff.
//!
//! Attribution is strict so parallel tests never see each other's objects:
//! - mounts: a /proc/mounts line that mentions the instance dir, its namespace or an extra path;
//! - cgroups: dirs strictly below `/<namespace>` and the CRI cgroup parent, in every hierarchy;
//! - processes: anything whose cmdline or environment mentions the instance dir (shims get
//!   `-address` and `TTRPC_ADDRESS`), that lives in one of those cgroups, or descends from one of
//!   those or from containerd; never the test process or its direct children (ctr);
//! - sockets: any socket file under the instance dir except containerd's own, plus sockets under
//!   /run/containerd/s and /run/rund held by an owned process;
//! - bundles: dirs under `<state>/io.containerd.runtime.v2.task/<ns>/`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::containerd::Containerd;

/// Global dirs where shims put their sockets.
const GLOBAL_SOCKET_DIRS: &[&str] = &["/run/containerd/s", "/run/rund"];

/// One process as seen in /proc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// Clock ticks after boot (`stat` field 22): with the pid, one process across its execs.
    pub start: u64,
    pub comm: String,
    pub cmdline: String,
}

/// Everything attributable to one containerd instance at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakSnapshot {
    pub mounts: BTreeSet<String>,
    pub cgroups: BTreeSet<String>,
    /// "pid@start" -> "pid comm cmdline": a process is the same one across an exec (a
    /// container's init becoming its workload), so only new pids (or reused ones) count.
    pub processes: BTreeMap<String, String>,
    pub sockets: BTreeSet<String>,
    pub bundles: BTreeSet<String>,
}

impl LeakSnapshot {
    /// Snapshot for `ctd`.
    pub fn take(ctd: &Containerd) -> LeakSnapshot {
        Self::take_with(ctd, &[])
    }

    /// Snapshot for `ctd`, also watching mounts that mention any of `extra` paths.
    pub fn take_with(ctd: &Containerd, extra: &[PathBuf]) -> LeakSnapshot {
        let mut needles: Vec<String> = ctd
            .watch_prefixes()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        needles.push(format!("/{}/", ctd.namespace));
        needles.extend(extra.iter().map(|p| p.display().to_string()));
        let procs = owned_processes(&ctd.watch_prefixes(), &ctd.cgroup_roots(), ctd.pid());
        let mut sockets = sockets_under(&ctd.dir);
        for s in [&ctd.layout.grpc, &ctd.layout.ttrpc] {
            sockets.remove(&s.display().to_string());
        }
        sockets.extend(global_sockets_held_by(&procs));
        LeakSnapshot {
            mounts: mount_lines(&needles),
            cgroups: cgroup_dirs(&ctd.cgroup_roots()),
            processes: procs
                .iter()
                .map(|p| {
                    (
                        format!("{}@{}", p.pid, p.start),
                        format!("{} {} {}", p.pid, p.comm, p.cmdline),
                    )
                })
                .collect(),
            sockets,
            bundles: bundles(ctd),
        }
    }

    /// What `after` has that `self` (before) has not, as readable text; `None` when clean.
    pub fn diff(&self, after: &LeakSnapshot) -> Option<String> {
        let mut out = String::new();
        let new_procs: Vec<&String> = after
            .processes
            .iter()
            .filter(|(k, _)| !self.processes.contains_key(*k))
            .map(|(_, v)| v)
            .collect();
        let sections: [(&str, Vec<&String>); 5] = [
            ("mounts", after.mounts.difference(&self.mounts).collect()),
            ("cgroups", after.cgroups.difference(&self.cgroups).collect()),
            ("processes", new_procs),
            ("sockets", after.sockets.difference(&self.sockets).collect()),
            ("bundles", after.bundles.difference(&self.bundles).collect()),
        ];
        for (name, new) in sections {
            if !new.is_empty() {
                out.push_str(&format!("leaked {name}:\n"));
                for n in new {
                    out.push_str(&format!("  + {n}\n"));
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// Panic with a readable diff if `after` holds anything `before` did not.
pub fn assert_no_leaks(before: &LeakSnapshot, after: &LeakSnapshot) {
    if let Some(d) = before.diff(after) {
        panic!("resources leaked:\n{d}");
    }
}

/// Re-take the snapshot until it matches `before` or `grace` passes (shims exit asynchronously
/// after `delete`), then assert. Returns the final snapshot.
pub fn assert_no_leaks_within(
    ctd: &Containerd,
    before: &LeakSnapshot,
    grace: Duration,
) -> LeakSnapshot {
    let deadline = Instant::now() + grace;
    loop {
        let after = LeakSnapshot::take(ctd);
        if before.diff(&after).is_none() || Instant::now() >= deadline {
            assert_no_leaks(before, &after);
            return after;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mount_lines(needles: &[String]) -> BTreeSet<String> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter(|l| needles.iter().any(|n| l.contains(n.as_str())))
        .map(str::to_owned)
        .collect()
}

/// Mount points (second field of /proc/self/mounts) under any of `dirs`.
pub fn mount_points_under(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(unescape_mount)
        .map(PathBuf::from)
        .filter(|p| dirs.iter().any(|d| p.starts_with(d)))
        .collect()
}

/// /proc/mounts escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Mount points of every cgroup hierarchy (v1 controllers and the v2 mount).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && (f[2] == "cgroup" || f[2] == "cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// An empty cgroup of rund's node-wide pool is kept on purpose (recycled
/// instead of removed); one that still holds processes is a leak.
fn is_idle_pool_slot(dir: &Path) -> bool {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(".rund-pool"));
    named
        && std::fs::read_to_string(dir.join("cgroup.procs"))
            .map(|p| p.trim().is_empty())
            .unwrap_or(true)
}

/// Dirs strictly below each root, in every hierarchy, as "<mount>:<path>".
fn cgroup_dirs(roots: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in cgroup_mounts() {
        for r in roots {
            let base = m.join(r.trim_start_matches('/'));
            let mut stack = vec![base.clone()];
            while let Some(d) = stack.pop() {
                let Ok(rd) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in rd.flatten() {
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        if is_idle_pool_slot(&e.path()) {
                            continue;
                        }
                        out.insert(format!("{}:{}", m.display(), e.path().display()));
                        stack.push(e.path());
                    }
                }
            }
        }
    }
    out
}

/// rmdir every (empty) cgroup under each root, deepest first, and the roots themselves.
pub fn remove_cgroups(roots: &[String]) {
    for m in cgroup_mounts() {
        for r in roots {
            let base = m.join(r.trim_start_matches('/'));
            let mut dirs = vec![base.clone()];
            let mut i = 0;
            while i < dirs.len() {
                if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
                    for e in rd.flatten() {
                        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                            dirs.push(e.path());
                        }
                    }
                }
                i += 1;
            }
            for d in dirs.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

fn read_proc(pid: u32) -> Option<(ProcInfo, String, String)> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let stat = std::fs::read_to_string(base.join("stat")).ok()?;
    // comm may hold spaces and parens: split at the last ')'.
    let (head, tail) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    let nul = |b: Vec<u8>| {
        String::from_utf8_lossy(&b)
            .replace('\0', " ")
            .trim()
            .to_owned()
    };
    let cmdline = nul(std::fs::read(base.join("cmdline")).unwrap_or_default());
    let environ = nul(std::fs::read(base.join("environ")).unwrap_or_default());
    let cgroup = std::fs::read_to_string(base.join("cgroup")).unwrap_or_default();
    Some((
        ProcInfo {
            pid,
            ppid,
            start,
            comm,
            cmdline,
        },
        environ,
        cgroup,
    ))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The shim processes of `ctd` (`containerd-shim*` in argv[0]).
pub fn shim_processes(ctd: &Containerd) -> Vec<ProcInfo> {
    owned_processes(&ctd.watch_prefixes(), &ctd.cgroup_roots(), ctd.pid())
        .into_iter()
        .filter(is_shim_argv)
        // A node's keeper (per-node mode) is the shim's parent, not a shim.
        .filter(|p| !is_keeper(p.pid))
        .collect()
}

/// Whether `p` runs a shim binary (`containerd-shim*` in argv[0]): a shim, or a node's keeper
/// (forked from one).
pub fn is_shim_argv(p: &ProcInfo) -> bool {
    p.cmdline
        .split_whitespace()
        .next()
        .is_some_and(|a| a.contains("containerd-shim"))
}

/// Whether `pid` is a node keeper (per-node mode).
pub fn is_keeper(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim_end() == "rund-keeper")
}

/// Processes attributable to the instance whose dirs are `prefixes` (see module docs).
/// `containerd` itself is excluded but its descendants are included.
pub fn owned_processes(
    prefixes: &[PathBuf],
    cgroup_roots: &[String],
    containerd: Option<u32>,
) -> Vec<ProcInfo> {
    let me = std::process::id();
    let needles: Vec<String> = prefixes
        .iter()
        .map(|p| format!("{}/", p.display()))
        .collect();
    let mut all: HashMap<u32, ProcInfo> = HashMap::new();
    let mut owned: BTreeSet<u32> = BTreeSet::new();
    for pid in all_pids() {
        let Some((info, environ, cgroup)) = read_proc(pid) else {
            continue;
        };
        let hit = |s: &str| needles.iter().any(|n| s.contains(n.as_str()));
        if hit(&info.cmdline) || hit(&environ) || in_cgroups(&cgroup, cgroup_roots) {
            owned.insert(pid);
        }
        all.insert(pid, info);
    }
    if let Some(c) = containerd {
        owned.insert(c);
    }
    // Close over descendants.
    loop {
        let before = owned.len();
        for p in all.values() {
            if owned.contains(&p.ppid) {
                owned.insert(p.pid);
            }
        }
        if owned.len() == before {
            break;
        }
    }
    owned
        .into_iter()
        .filter(|pid| Some(*pid) != containerd && *pid != me)
        .filter_map(|pid| all.remove(&pid))
        .filter(|p| p.ppid != me)
        .collect()
}

fn in_cgroups(cgroup_file: &str, roots: &[String]) -> bool {
    cgroup_file
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|p| {
            roots
                .iter()
                .any(|r| p == r || p.starts_with(&format!("{}/", r.trim_end_matches('/'))))
        })
}

fn sockets_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_socket() {
                out.insert(e.path().display().to_string());
            }
        }
    }
    out
}

/// Sockets in the global shim dirs that one of `procs` has open (via /proc/net/unix inodes).
fn global_sockets_held_by(procs: &[ProcInfo]) -> BTreeSet<String> {
    let net = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut by_inode: HashMap<String, String> = HashMap::new();
    for l in net.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 8 && GLOBAL_SOCKET_DIRS.iter().any(|d| f[7].starts_with(d)) {
            by_inode.insert(f[6].to_owned(), f[7].to_owned());
        }
    }
    let mut out = BTreeSet::new();
    if by_inode.is_empty() {
        return out;
    }
    for p in procs {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{}/fd", p.pid)) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = std::fs::read_link(e.path()) else {
                continue;
            };
            let t = t.display().to_string();
            if let Some(ino) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                if let Some(path) = by_inode.get(ino) {
                    out.insert(path.clone());
                }
            }
        }
    }
    out
}

fn bundles(ctd: &Containerd) -> BTreeSet<String> {
    let base = ctd.layout.state.join("io.containerd.runtime.v2.task");
    let mut out = BTreeSet::new();
    let Ok(nss) = std::fs::read_dir(&base) else {
        return out;
    };
    for ns in nss.flatten() {
        if let Ok(ids) = std::fs::read_dir(ns.path()) {
            for id in ids.flatten() {
                out.insert(id.path().display().to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_membership_is_path_aware() {
        let roots = vec!["/rit-ab".to_owned()];
        assert!(in_cgroups("4:memory:/rit-ab/c1\n", &roots));
        assert!(in_cgroups("4:memory:/rit-ab\n", &roots));
        assert!(!in_cgroups("4:memory:/rit-abc/c1\n", &roots));
        assert!(!in_cgroups("0::/\n", &roots));
    }

    #[test]
    fn diff_reports_only_new_items() {
        let mut before = LeakSnapshot::default();
        before.mounts.insert("old".into());
        let mut after = before.clone();
        assert!(before.diff(&after).is_none());
        after
            .processes
            .insert("42@100".into(), "42 shim containerd-shim-rund-v2".into());
        after.mounts.remove("old");
        let d = before.diff(&after).unwrap();
        assert!(
            d.contains("leaked processes") && d.contains("+ 42 shim containerd-shim-rund-v2"),
            "{d}"
        );
        assert!(!d.contains("old"), "{d}");
        // The same process after an exec (an init becoming its workload) is no leak; a reused
        // pid (a new start time) is.
        let mut before = after.clone();
        before
            .processes
            .insert("43@200".into(), "43 rund-init rund-init".into());
        let mut after = before.clone();
        after
            .processes
            .insert("43@200".into(), "43 sleep sleep 100000".into());
        assert!(before.diff(&after).is_none());
        after.processes.remove("42@100");
        after
            .processes
            .insert("42@900".into(), "42 sleep sleep 1".into());
        assert!(before.diff(&after).unwrap().contains("+ 42 sleep sleep 1"));
    }

    #[test]
    fn mount_escapes() {
        assert_eq!(unescape_mount("/a\\040b\\134c"), "/a b\\c");
    }
}
