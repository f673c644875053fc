//! Pod cgroups made and removed as the kubelet's cgroupfs driver does: on
//! v1, the same relative directory in every hierarchy, with cpuset.cpus and
//! cpuset.mems copied from the parent; on v2, one directory per level with
//! the parent's controllers enabled for it. The threads doing it are noted,
//! so their own tracepoint events are told apart from the runtime's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rund_cgroup::Hierarchy;

static BENCH_TIDS: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn note_tid() {
    let tid = nix::unistd::gettid().as_raw();
    if let Ok(mut g) = BENCH_TIDS.lock() {
        g.get_or_insert_with(HashSet::new).insert(tid);
    }
}

/// Threads that made or removed pod cgroups.
pub fn bench_tids() -> HashSet<i32> {
    BENCH_TIDS
        .lock()
        .ok()
        .and_then(|g| g.clone())
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct Layout {
    /// Where the kubelet makes a pod cgroup: every v1 hierarchy and, on a
    /// hybrid host, the cgroup2 mount too (libcontainer's cgroupfs manager
    /// keeps a path there); on v2, the root.
    pub roots: Vec<PathBuf>,
    pub v2: bool,
    pub hybrid: bool,
}

impl Layout {
    pub fn detect() -> Result<Layout, String> {
        let h = Hierarchy::detect().map_err(|e| format!("cgroup layout: {e}"))?;
        let mut roots = h.roots();
        let mut hybrid = false;
        if let Hierarchy::V1 {
            unified: Some(u), ..
        } = &h
        {
            roots.push(u.clone());
            hybrid = true;
        }
        Ok(Layout {
            roots,
            v2: h.is_v2(),
            hybrid,
        })
    }

    pub fn describe(&self) -> String {
        match (self.v2, self.hybrid) {
            (true, _) => "cgroup v2".into(),
            (false, true) => format!(
                "cgroup v1 hybrid: {} v1 hierarchies + the cgroup2 mount",
                self.roots.len() - 1
            ),
            (false, false) => format!("cgroup v1: {} hierarchies", self.roots.len()),
        }
    }

    /// mkdir each missing level of `rel` (no leading '/') as the kubelet does.
    pub fn make(&self, rel: &str) -> Result<(), String> {
        note_tid();
        for root in &self.roots {
            let mut cur = root.clone();
            for c in Path::new(rel).components() {
                let parent = cur.clone();
                cur.push(c);
                if cur.is_dir() {
                    continue;
                }
                if self.v2 {
                    enable_controllers(&parent);
                }
                std::fs::create_dir(&cur).map_err(|e| format!("mkdir {}: {e}", cur.display()))?;
                if !self.v2 {
                    copy_cpuset(&parent, &cur)?;
                }
            }
        }
        Ok(())
    }

    /// rmdir `rel` in every hierarchy, retrying a busy one until `limit`
    /// (the kubelet retries too); a directory already gone is fine.
    pub fn remove(&self, rel: &str, limit: Duration) -> Result<(), String> {
        note_tid();
        let deadline = Instant::now() + limit;
        for root in &self.roots {
            let dir = root.join(rel);
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => {
                        let children = child_dirs(&dir);
                        return Err(format!(
                            "rmdir {}: {e}{}",
                            dir.display(),
                            if children.is_empty() {
                                String::new()
                            } else {
                                format!(" (holds {})", children.join(", "))
                            }
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes `rel` and everything below it in every hierarchy, deepest
    /// first; returns what is left.
    pub fn sweep(&self, rel: &str) -> Vec<String> {
        note_tid();
        let mut left = Vec::new();
        for root in &self.roots {
            let base = root.join(rel);
            let mut dirs = vec![base];
            let mut i = 0;
            while i < dirs.len() {
                let d = dirs[i].clone();
                dirs.extend(child_dirs(&d).into_iter().map(|c| d.join(c)));
                i += 1;
            }
            for d in dirs.iter().rev() {
                if let Err(e) = std::fs::remove_dir(d) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        left.push(format!("{}: {e}", d.display()));
                    }
                }
            }
        }
        left
    }
}

fn child_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A new v1 cpuset cgroup starts with no cpus and no mems; the kubelet's
/// driver (libcontainer) copies the parent's.
fn copy_cpuset(parent: &Path, dir: &Path) -> Result<(), String> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        if let Ok(v) = std::fs::read_to_string(parent.join(f)) {
            let p = dir.join(f);
            std::fs::write(&p, v.trim()).map_err(|e| format!("write {}: {e}", p.display()))?;
        }
    }
    Ok(())
}

/// v2: every controller the parent has, enabled for its children. A
/// controller the parent cannot pass down is left out by the kernel.
fn enable_controllers(parent: &Path) {
    let Ok(available) = std::fs::read_to_string(parent.join("cgroup.controllers")) else {
        return;
    };
    let want: Vec<String> = available
        .split_whitespace()
        .map(|c| format!("+{c}"))
        .collect();
    if std::fs::write(parent.join("cgroup.subtree_control"), want.join(" ")).is_err() {
        // One at a time, so one refusal does not cost the others.
        for w in want {
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake v1 tree: plain directories stand in for hierarchies.
    #[test]
    fn v1_makes_every_hierarchy_and_copies_cpuset() {
        let t = tempfile::tempdir().unwrap();
        let (cpuset, memory) = (t.path().join("cpuset"), t.path().join("memory"));
        for d in [&cpuset, &memory] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(cpuset.join("cpuset.cpus"), "0-1\n").unwrap();
        std::fs::write(cpuset.join("cpuset.mems"), "0\n").unwrap();
        let l = Layout {
            roots: vec![cpuset.clone(), memory.clone()],
            v2: false,
            hybrid: false,
        };
        // A real cpuset makes these files itself; here the copy goes to
        // every level (plain files in a fake tree).
        l.make("top/kubepods/pod1").unwrap();
        assert_eq!(
            std::fs::read_to_string(cpuset.join("top/kubepods/pod1/cpuset.cpus")).unwrap(),
            "0-1"
        );
        assert!(memory.join("top/kubepods/pod1").is_dir());
        assert!(bench_tids().contains(&nix::unistd::gettid().as_raw()));
        // A pod cgroup with something left inside cannot go.
        std::fs::create_dir(memory.join("top/kubepods/pod1/left")).unwrap();
        for f in ["cpuset.cpus", "cpuset.mems"] {
            std::fs::remove_file(cpuset.join("top/kubepods/pod1").join(f)).unwrap();
        }
        let e = l
            .remove("top/kubepods/pod1", Duration::from_millis(10))
            .unwrap_err();
        assert!(e.contains("holds left"), "{e}");
        assert!(l.sweep("top/kubepods/pod1").is_empty());
        assert!(!memory.join("top/kubepods/pod1").exists());
        l.remove("top/kubepods/pod1", Duration::ZERO).unwrap();
    }
}
