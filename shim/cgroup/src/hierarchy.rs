//! Which cgroup layout the host has, read from /proc/self/mountinfo.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One mounted v1 hierarchy (one mount may carry several controllers,
/// e.g. `cpu,cpuacct`; here cpu and cpuacct are separate mounts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Hierarchy {
    /// Controllers on this hierarchy, e.g. `["cpu"]` or `["name=systemd"]`.
    pub controllers: Vec<String>,
    /// Mount point, e.g. `/sys/fs/cgroup/cpu`.
    pub mount: PathBuf,
}

impl V1Hierarchy {
    /// Whether this hierarchy carries `ctrl`.
    pub fn has(&self, ctrl: &str) -> bool {
        self.controllers.iter().any(|c| c == ctrl)
    }
    /// Stable name, e.g. `cpu,cpuacct`.
    pub fn name(&self) -> String {
        self.controllers.join(",")
    }
}

/// The host layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v1 (legacy or hybrid). Hierarchies are sorted by name; the first
    /// is the pool's *leader* (see `pool`).
    V1 {
        hierarchies: Vec<V1Hierarchy>,
        /// The cgroup2 mount of a hybrid host (not used for containers).
        unified: Option<PathBuf>,
    },
    /// Pure cgroup v2 rooted at `root`.
    V2 { root: PathBuf },
}

impl Hierarchy {
    /// Detect the layout of this host.
    pub fn detect() -> Result<Self> {
        let p = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(p).map_err(|e| Error::io("read", p, e))?;
        Self::from_mountinfo(&text)
    }

    /// As [`Hierarchy::detect`], through a record in `dir` (the pool's
    /// state dir) that spares later processes the read of mountinfo.
    pub fn detect_remembered(dir: &Path) -> Result<Self> {
        crate::layout_cache::detect(dir, &crate::layout_cache::Host)
    }

    /// Parse mountinfo text (exposed for tests).
    pub fn from_mountinfo(text: &str) -> Result<Self> {
        let mut v1: Vec<V1Hierarchy> = Vec::new();
        let mut v2: Option<PathBuf> = None;
        for line in text.lines() {
            let Some((pre, post)) = line.split_once(" - ") else {
                continue;
            };
            let fields: Vec<&str> = pre.split_whitespace().collect();
            let post: Vec<&str> = post.split_whitespace().collect();
            if fields.len() < 5 || post.len() < 3 {
                continue;
            }
            let mount = PathBuf::from(unescape(fields[4]));
            match post[0] {
                // Prefer the canonical mount if there are several.
                "cgroup2" if v2.is_none() || mount == Path::new("/sys/fs/cgroup") => {
                    v2 = Some(mount);
                }
                "cgroup" => {
                    let mut ctrls: Vec<String> = post[2]
                        .split(',')
                        .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                        .filter(|o| is_v1_controller(o))
                        .map(str::to_string)
                        .collect();
                    if let Some(n) = post[2].split(',').find(|o| o.starts_with("name=")) {
                        ctrls.push(n.to_string());
                    }
                    if ctrls.is_empty() {
                        continue;
                    }
                    ctrls.sort();
                    // A hierarchy can be mounted twice (bind mounts): keep one.
                    if !v1.iter().any(|h| h.controllers == ctrls) {
                        v1.push(V1Hierarchy {
                            controllers: ctrls,
                            mount,
                        });
                    }
                }
                _ => {}
            }
        }
        if !v1.is_empty() {
            v1.sort_by_key(|h| h.name());
            return Ok(Hierarchy::V1 {
                hierarchies: v1,
                unified: v2,
            });
        }
        match v2 {
            Some(root) => Ok(Hierarchy::V2 { root }),
            None => Err(Error::ControllerMissing(
                "cgroup (no cgroup filesystem mounted)",
            )),
        }
    }

    /// A v1 layout with one hierarchy per entry under `root` (for tests):
    /// `v1_at(root, &["cpu", "memory"])` gives `root/cpu`, `root/memory`.
    pub fn v1_at(root: &Path, ctrls: &[&str]) -> Self {
        let mut hierarchies: Vec<V1Hierarchy> = ctrls
            .iter()
            .map(|c| V1Hierarchy {
                controllers: vec![c.to_string()],
                mount: root.join(c.trim_start_matches("name=")),
            })
            .collect();
        hierarchies.sort_by_key(|h| h.name());
        Hierarchy::V1 {
            hierarchies,
            unified: None,
        }
    }

    /// A v2 layout rooted at `root` (a private mount, a child of the hybrid
    /// unified mount, or a fake tree).
    pub fn v2_at(root: &Path) -> Self {
        Hierarchy::V2 {
            root: root.to_path_buf(),
        }
    }

    pub fn is_v2(&self) -> bool {
        matches!(self, Hierarchy::V2 { .. })
    }

    /// The roots a container cgroup lives under: every v1 hierarchy, or the v2 root.
    pub fn roots(&self) -> Vec<PathBuf> {
        match self {
            Hierarchy::V1 { hierarchies, .. } => {
                hierarchies.iter().map(|h| h.mount.clone()).collect()
            }
            Hierarchy::V2 { root } => vec![root.clone()],
        }
    }

    /// Mount point of the v1 hierarchy carrying `ctrl`.
    pub fn v1_mount(&self, ctrl: &str) -> Option<&Path> {
        match self {
            Hierarchy::V1 { hierarchies, .. } => hierarchies
                .iter()
                .find(|h| h.has(ctrl))
                .map(|h| h.mount.as_path()),
            Hierarchy::V2 { .. } => None,
        }
    }
}

fn is_v1_controller(o: &str) -> bool {
    matches!(
        o,
        "cpu"
            | "cpuacct"
            | "cpuset"
            | "memory"
            | "devices"
            | "freezer"
            | "blkio"
            | "pids"
            | "net_cls"
            | "net_prio"
            | "perf_event"
            | "hugetlb"
            | "rdma"
            | "misc"
    )
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_keeps_cpu_and_cpuacct_apart() {
        let h = Hierarchy::from_mountinfo(HYBRID).unwrap();
        let Hierarchy::V1 {
            hierarchies,
            unified,
        } = &h
        else {
            panic!("expected v1, got {h:?}");
        };
        let names: Vec<String> = hierarchies.iter().map(|h| h.name()).collect();
        assert_eq!(names, ["cpu", "cpuacct", "memory", "name=systemd"]);
        assert_eq!(
            unified.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            h.v1_mount("cpuacct"),
            Some(Path::new("/sys/fs/cgroup/cpuacct"))
        );
    }

    #[test]
    fn comounted_and_pure_v2() {
        let t = "1 0 0:1 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu\n";
        let h = Hierarchy::from_mountinfo(t).unwrap();
        assert_eq!(h.v1_mount("cpu"), h.v1_mount("cpuacct"));
        let t = "1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            Hierarchy::from_mountinfo(t).unwrap(),
            Hierarchy::v2_at(Path::new("/sys/fs/cgroup"))
        );
        assert!(Hierarchy::from_mountinfo("").is_err());
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
