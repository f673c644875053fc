//! A process born in its cgroup, so placement moves nothing.
//!
//! Moving a process by writing `cgroup.procs` takes the kernel's global
//! threadgroup rwsem for writing, and the first writer after a quiet spell
//! waits a whole RCU grace period for it (about 10 ms here, more than the
//! rest of Create). Two ways around it:
//! - v2: `clone3(CLONE_INTO_CGROUP)` with the cgroup's directory fd;
//! - v1: a thread that moves *itself* (`"0"` written to `tasks`) skips that
//!   lock, and a child it forks is born in the thread's cgroups. The agent
//!   does this in a short-lived thread with the `tasks` fds the shim opened
//!   (the kernel checks the opener's credentials, so it works from inside a
//!   user namespace too).
//!
//! The shim's placement then finds the process in place and writes nothing
//! (`missing_v1`); anything not in place is still written, so a refused
//! birth only costs time.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hierarchy::V1Hierarchy;

/// `tasks` of every v1 directory, opened for writing (close-on-exec).
pub(crate) fn tasks_fds(dirs: &[(V1Hierarchy, PathBuf)]) -> Result<Vec<OwnedFd>> {
    dirs.iter()
        .map(|(_, d)| {
            let p = d.join("tasks");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .map(OwnedFd::from)
                .map_err(|e| Error::io("open", &p, e))
        })
        .collect()
}

/// The path a process is in on hierarchy `h` (relative to the hierarchy's
/// root), from its `/proc/<pid>/cgroup` text; `None` if no line names
/// exactly `h`'s controllers.
pub(crate) fn v1_rel<'a>(h: &V1Hierarchy, proc_cgroup: &'a str) -> Option<&'a Path> {
    let want: BTreeSet<&str> = h.controllers.iter().map(String::as_str).collect();
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let have: BTreeSet<&str> = ctrls.split(',').collect();
        (have == want).then(|| Path::new(path.trim_start_matches('/')))
    })
}

/// Whether `dir` is the cgroup at `rel`: `dir` less `rel` must be where a
/// cgroup filesystem starts (`is_root`), so a tree that only ends the same
/// way never counts.
fn is_at(dir: &Path, rel: &Path, is_root: &mut dyn FnMut(&Path) -> bool) -> bool {
    let mut root = dir.to_path_buf();
    for _ in 0..rel.components().count() {
        if !root.pop() {
            return false;
        }
    }
    root.join(rel) == dir && is_root(&root)
}

/// Whether `p` is the root of a v1 cgroup mount. `seen` remembers each
/// path's answer for one placement: every hierarchy's mount shares the
/// same parent (/sys/fs/cgroup), which is then asked about once, not nine
/// times.
fn is_v1_root(p: &Path, seen: &mut Vec<(PathBuf, bool)>) -> bool {
    let mut v1 = |p: &Path| {
        if let Some((_, v)) = seen.iter().find(|(q, _)| q == p) {
            return *v;
        }
        let v = nix::sys::statfs::statfs(p)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP_SUPER_MAGIC);
        seen.push((p.to_path_buf(), v));
        v
    };
    v1(p) && p.parent().is_some_and(|q| !v1(q))
}

/// The v1 directories a process is not in yet (all of them if its
/// membership cannot be read).
pub(crate) fn missing_v1<'a>(
    dirs: &'a [(V1Hierarchy, PathBuf)],
    proc_cgroup: Option<&str>,
) -> Vec<&'a Path> {
    let mut seen = Vec::new();
    missing_with(dirs, proc_cgroup, &mut |p| is_v1_root(p, &mut seen))
}

fn missing_with<'a>(
    dirs: &'a [(V1Hierarchy, PathBuf)],
    proc_cgroup: Option<&str>,
    is_root: &mut dyn FnMut(&Path) -> bool,
) -> Vec<&'a Path> {
    dirs.iter()
        .filter(|(h, d)| {
            let rel = proc_cgroup.and_then(|t| v1_rel(h, t));
            !rel.is_some_and(|r| is_at(d, r, is_root))
        })
        .map(|(_, d)| d.as_path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "\
13:name=systemd:/system.slice/containerd.service
12:pids:/default/c1
5:cpuacct,cpu:/default/c1
0::/system.slice/containerd.service
";

    fn h(ctrls: &[&str], mount: &str) -> V1Hierarchy {
        V1Hierarchy {
            controllers: ctrls.iter().map(|c| c.to_string()).collect(),
            mount: PathBuf::from(mount),
        }
    }

    #[test]
    fn finds_the_path_on_each_hierarchy_by_its_controller_set() {
        let cpu = h(&["cpu", "cpuacct"], "/sys/fs/cgroup/cpu,cpuacct");
        assert_eq!(v1_rel(&cpu, PROC), Some(Path::new("default/c1")));
        let sd = h(&["name=systemd"], "/sys/fs/cgroup/systemd");
        assert_eq!(
            v1_rel(&sd, PROC),
            Some(Path::new("system.slice/containerd.service"))
        );
        assert_eq!(
            v1_rel(&h(&["cpu"], "/x"), PROC),
            None,
            "cpu alone is not cpu,cpuacct"
        );
        assert_eq!(v1_rel(&h(&["blkio"], "/x"), PROC), None);
    }

    #[test]
    fn lists_only_the_dirs_the_process_is_not_in() {
        let dirs = vec![
            (h(&["pids"], "/c/pids"), PathBuf::from("/c/pids/default/c1")),
            (
                h(&["cpu", "cpuacct"], "/c/cpu,cpuacct"),
                PathBuf::from("/c/cpu,cpuacct/default/c1"),
            ),
            (
                h(&["name=systemd"], "/c/systemd"),
                PathBuf::from("/c/systemd/default/c1"),
            ),
            (
                h(&["blkio"], "/c/blkio"),
                PathBuf::from("/c/blkio/default/c1"),
            ),
        ];
        let mut roots = |p: &Path| p.parent() == Some(Path::new("/c"));
        assert_eq!(
            missing_with(&dirs, Some(PROC), &mut roots),
            vec![
                Path::new("/c/systemd/default/c1"),
                Path::new("/c/blkio/default/c1")
            ]
        );
        assert_eq!(
            missing_with(&dirs, None, &mut roots).len(),
            4,
            "unreadable: write all"
        );
        // The same path under a tree that is not a mount root is elsewhere.
        let nested = vec![(
            h(&["pids"], "/c/pids/x"),
            PathBuf::from("/c/pids/x/default/c1"),
        )];
        let in_x = "8:pids:/x/default/c1\n";
        assert!(missing_with(&nested, Some(in_x), &mut roots).is_empty());
        assert_eq!(missing_with(&nested, Some(PROC), &mut roots).len(), 1);
    }

    #[test]
    fn a_root_check_asks_each_path_once_per_placement() {
        // Seeded answers are used as they are: no statfs of a path that
        // does not even exist.
        let mut seen = vec![
            (PathBuf::from("/nowhere/cg"), true),
            (PathBuf::from("/nowhere"), false),
        ];
        assert!(is_v1_root(Path::new("/nowhere/cg"), &mut seen));
        assert_eq!(seen.len(), 2, "nothing asked again");
        // A new path is asked once and remembered.
        assert!(!is_v1_root(Path::new("/nowhere/other"), &mut seen));
        assert_eq!(
            seen.last(),
            Some(&(PathBuf::from("/nowhere/other"), false)),
            "{seen:?}"
        );
        let n = seen.len();
        assert!(!is_v1_root(Path::new("/nowhere/other"), &mut seen));
        assert_eq!(seen.len(), n);
    }
}
