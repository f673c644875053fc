//! Test helpers: a private test parent in every real hierarchy, removed on
//! drop even when the test fails, and child processes gated on stdin.
#![allow(dead_code)]

use rund_cgroup::fs::RealFs;
use rund_cgroup::{CgroupConfig, Cgroups, Hierarchy, V1Hierarchy};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

static N: AtomicU32 = AtomicU32::new(0);

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh `rund-test-<pid>-<n>` directory under every real v1 hierarchy
/// (or under the cgroup2 mount), used as the roots of a test [`Hierarchy`].
pub struct TestTree {
    pub roots: Vec<PathBuf>,
    pub hier: Hierarchy,
    pub state: tempfile::TempDir,
}

impl TestTree {
    /// `None` (after [`rund_skip::skip`]) when not root or not on v1.
    pub fn v1() -> Option<TestTree> {
        if !is_root() {
            rund_skip::skip!("needs root");
        }
        let Ok(Hierarchy::V1 { hierarchies, .. }) = Hierarchy::detect() else {
            rund_skip::skip!("host is not cgroup v1");
        };
        let name = format!(
            "rund-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut roots = Vec::new();
        let mut hs = Vec::new();
        for h in hierarchies {
            let d = h.mount.join(&name);
            std::fs::create_dir(&d).expect("mkdir test root");
            if h.has("cpuset") {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(h.mount.join(f)).unwrap();
                    std::fs::write(d.join(f), v.trim()).unwrap();
                }
            }
            roots.push(d.clone());
            hs.push(V1Hierarchy {
                controllers: h.controllers,
                mount: d,
            });
        }
        Some(TestTree {
            roots,
            hier: Hierarchy::V1 {
                hierarchies: hs,
                unified: None,
            },
            state: tempfile::tempdir().unwrap(),
        })
    }

    /// A child of a cgroup2 mount (pure v2 host or the hybrid's unified).
    pub fn v2() -> Option<TestTree> {
        if !is_root() {
            rund_skip::skip!("needs root");
        }
        let mount = match Hierarchy::detect() {
            Ok(Hierarchy::V2 { root }) => {
                // A bare cgroup2 mount (a test VM without systemd) delegates
                // nothing; a root cgroup may enable controllers with
                // processes in it.
                let have =
                    std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
                for c in have.split_whitespace() {
                    let _ = std::fs::write(root.join("cgroup.subtree_control"), format!("+{c}"));
                }
                root
            }
            Ok(Hierarchy::V1 {
                unified: Some(u), ..
            }) => u,
            _ => rund_skip::skip!("no cgroup2 mount"),
        };
        let name = format!(
            "rund-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let d = mount.join(name);
        if let Err(e) = std::fs::create_dir(&d) {
            rund_skip::skip!("cannot mkdir in {}: {e}", mount.display());
        }
        Some(TestTree {
            roots: vec![d.clone()],
            hier: Hierarchy::v2_at(&d),
            state: tempfile::tempdir().unwrap(),
        })
    }

    pub fn config(&self) -> CgroupConfig {
        CgroupConfig {
            state_dir: self.state.path().to_path_buf(),
            ..CgroupConfig::default()
        }
    }

    pub fn cgroups(&self, cfg: CgroupConfig) -> Cgroups {
        Cgroups::with(self.hier.clone(), Arc::new(RealFs), cfg)
    }

    /// Every directory below the roots, deepest first.
    pub fn all_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for r in &self.roots {
            walk(r, &mut out);
        }
        out
    }
}

fn walk(d: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(&e.path(), out);
            }
        }
    }
    out.push(d.to_path_buf());
}

impl Drop for TestTree {
    fn drop(&mut self) {
        for d in self.all_dirs() {
            let _ = std::fs::write(d.join("freezer.state"), "THAWED");
            let _ = std::fs::write(d.join("cgroup.freeze"), "0");
            // Only our own children can be in the test tree.
            if let Ok(p) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for pid in p.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::SIGKILL,
                    );
                }
            }
        }
        for d in self.all_dirs() {
            for _ in 0..200 {
                match std::fs::remove_dir(&d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(10))
                    }
                    _ => break,
                }
            }
        }
    }
}

/// A `sh -c script` child that waits for a line on stdin before running
/// `script`, so it can be put in a cgroup first.
pub struct Gated {
    pub child: Child,
}

impl Gated {
    pub fn spawn(script: &str) -> Gated {
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("read _gate; {script}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sh");
        Gated { child }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn release(&mut self) {
        let mut s = self.child.stdin.take().expect("stdin");
        s.write_all(b"go\n").unwrap();
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// Slot directory names directly under `dir`.
pub fn slots_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(rund_cgroup::SLOT_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// Every leader slot exists in every hierarchy and no hierarchy has a slot
/// the leader lacks; returns the free slot count.
pub fn assert_slots_consistent(t: &TestTree, parent: &str) -> usize {
    let leader: BTreeSet<String> = slots_in(&t.roots[0].join(parent)).into_iter().collect();
    for r in &t.roots[1..] {
        let here: BTreeSet<String> = slots_in(&r.join(parent)).into_iter().collect();
        assert_eq!(here, leader, "slots differ in {}", r.display());
    }
    leader.len()
}

/// Non-slot children of `parent` in any hierarchy.
pub fn containers_left(t: &TestTree, parent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in &t.roots {
        if let Ok(rd) = std::fs::read_dir(r.join(parent)) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() && !n.starts_with(".rund-pool") {
                    out.push(format!("{}/{n}", r.display()));
                }
            }
        }
    }
    out
}
