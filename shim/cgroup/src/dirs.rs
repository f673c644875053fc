//! Where one cgroup lives: one directory per v1 hierarchy, or one v2 directory.

use crate::hierarchy::{Hierarchy, V1Hierarchy};
use std::path::{Path, PathBuf};

/// The directories of one cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dirs {
    /// (hierarchy, directory) for every v1 hierarchy; the first is the leader.
    V1(Vec<(V1Hierarchy, PathBuf)>),
    /// The single v2 directory.
    V2(PathBuf),
}

impl Dirs {
    /// The directories of relative path `rel` in `h`.
    pub fn of(h: &Hierarchy, rel: &Path) -> Self {
        match h {
            Hierarchy::V1 { hierarchies, .. } => Dirs::V1(
                hierarchies
                    .iter()
                    .map(|x| (x.clone(), x.mount.join(rel)))
                    .collect(),
            ),
            Hierarchy::V2 { root } => Dirs::V2(root.join(rel)),
        }
    }

    /// The directory of v1 controller `ctrl`.
    pub fn v1(&self, ctrl: &str) -> Option<&Path> {
        match self {
            Dirs::V1(v) => v
                .iter()
                .find(|(h, _)| h.has(ctrl))
                .map(|(_, d)| d.as_path()),
            Dirs::V2(_) => None,
        }
    }

    /// Every directory (leader first on v1).
    pub fn all(&self) -> Vec<&Path> {
        match self {
            Dirs::V1(v) => v.iter().map(|(_, d)| d.as_path()).collect(),
            Dirs::V2(d) => vec![d.as_path()],
        }
    }

    /// The directory whose cgroup.procs lists the members (freezer on v1).
    pub fn procs_dir(&self) -> &Path {
        match self {
            Dirs::V1(v) => v
                .iter()
                .find(|(h, _)| h.has("freezer"))
                .or_else(|| v.first())
                .map(|(_, d)| d.as_path())
                .unwrap_or_else(|| Path::new("/nonexistent")),
            Dirs::V2(d) => d,
        }
    }
}
