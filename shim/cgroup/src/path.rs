//! The OCI `cgroupsPath`, validated and split into parent and name.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Prefix of pool slot names; reserved, so no container may use it.
pub const SLOT_PREFIX: &str = ".rund-pool-";

/// Everything starting with this is rund's (slots, gc scratch names).
pub(crate) const RESERVED_PREFIX: &str = ".rund-pool";

/// A validated cgroup path relative to a hierarchy root, e.g. `default/c1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CgroupPath {
    parts: Vec<String>,
}

impl CgroupPath {
    /// Parse an OCI cgroupsPath.
    ///
    /// * `/ns/id` (containerd's default) and `ns/id` are both taken relative to
    ///   the hierarchy roots (rund does not nest under its own cgroup).
    /// * systemd style `slice:prefix:name` maps to the path systemd would use:
    ///   `kubepods-besteffort.slice:cri:abc` gives
    ///   `kubepods.slice/kubepods-besteffort.slice/cri-abc.scope`. rund writes
    ///   cgroupfs directly; it does not ask systemd for a scope.
    pub fn parse(raw: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidPath {
            path: raw.to_string(),
            reason: reason.to_string(),
        };
        if raw.contains('\0') || raw.contains('\n') {
            return Err(bad("contains a NUL or newline"));
        }
        let parts: Vec<String> = if !raw.contains('/') && raw.matches(':').count() == 2 {
            let mut it = raw.split(':');
            let (slice, prefix, name) = (it.next(), it.next(), it.next());
            let (slice, prefix, name) = (
                slice.unwrap_or(""),
                prefix.unwrap_or(""),
                name.unwrap_or(""),
            );
            if name.is_empty() {
                return Err(bad("systemd form slice:prefix:name needs a name"));
            }
            let mut parts = expand_slice(if slice.is_empty() {
                "system.slice"
            } else {
                slice
            })
            .map_err(|r| bad(&r))?;
            let unit = if name.ends_with(".slice") {
                name.to_string()
            } else if prefix.is_empty() {
                format!("{name}.scope")
            } else {
                format!("{prefix}-{name}.scope")
            };
            parts.push(unit);
            parts
        } else {
            raw.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        };
        if parts.is_empty() {
            return Err(bad("empty path (the root cgroup cannot be a container's)"));
        }
        for p in &parts {
            if p == "." || p == ".." {
                return Err(bad("'.' and '..' are not allowed"));
            }
            if p.starts_with(RESERVED_PREFIX) {
                return Err(bad("names starting with .rund-pool- are reserved"));
            }
            if p.len() > 255 {
                return Err(bad("a component is longer than 255 bytes"));
            }
        }
        // Control files live next to child cgroups: refuse names that look
        // like them so a container cannot shadow e.g. `memory.max`.
        let last = &parts[parts.len() - 1];
        if last.starts_with("cgroup.") || last == "tasks" || last == "notify_on_release" {
            return Err(bad("the name collides with a cgroup control file"));
        }
        Ok(CgroupPath { parts })
    }

    /// The last component: the container's cgroup name.
    pub fn name(&self) -> &str {
        &self.parts[self.parts.len() - 1]
    }

    /// The parent, relative (may be empty = the root).
    pub fn parent(&self) -> PathBuf {
        self.parts[..self.parts.len() - 1].iter().collect()
    }

    /// The relative path, e.g. `default/c1`.
    pub fn rel(&self) -> PathBuf {
        self.parts.iter().collect()
    }

    /// The directory under a hierarchy root.
    pub fn under(&self, root: &Path) -> PathBuf {
        root.join(self.rel())
    }

    /// A string usable as a single file name (for state files).
    pub fn key(&self) -> String {
        escape_key(&self.rel().to_string_lossy())
    }
}

/// Escape a relative path into one file name.
pub(crate) fn escape_key(s: &str) -> String {
    let s = s.replace('%', "%25").replace('/', "%2F");
    if s.is_empty() {
        "%root".to_string()
    } else {
        s
    }
}

/// `a-b-c.slice` lives at `a.slice/a-b.slice/a-b-c.slice`, as systemd does.
fn expand_slice(slice: &str) -> std::result::Result<Vec<String>, String> {
    let Some(base) = slice.strip_suffix(".slice") else {
        return Err(format!("{slice:?} is not a .slice"));
    };
    // `-.slice` is systemd's root slice.
    if base == "-" {
        return Ok(Vec::new());
    }
    // As runc's ExpandSlice: no empty dash-separated component.
    if base.contains('/') || base.split('-').any(str::is_empty) {
        return Err(format!("invalid slice name {slice:?}"));
    }
    let mut out = Vec::new();
    let mut acc = String::new();
    for comp in base.split('-') {
        if !acc.is_empty() {
            acc.push('-');
        }
        acc.push_str(comp);
        out.push(format!("{acc}.slice"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_default() {
        let p = CgroupPath::parse("/default/c1").unwrap();
        assert_eq!(p.name(), "c1");
        assert_eq!(p.parent(), PathBuf::from("default"));
        assert_eq!(p.under(Path::new("/x")), PathBuf::from("/x/default/c1"));
        assert_eq!(p.key(), "default%2Fc1");
    }

    #[test]
    fn systemd_form() {
        let p = CgroupPath::parse("kubepods-besteffort-pod1.slice:cri-containerd:abc").unwrap();
        assert_eq!(
            p.rel(),
            PathBuf::from(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope"
            )
        );
        let p = CgroupPath::parse(":docker:abc").unwrap();
        assert_eq!(p.rel(), PathBuf::from("system.slice/docker-abc.scope"));
        assert!(CgroupPath::parse("nota:slice:x").is_err());
    }

    /// Slices expand as runc's ExpandSlice: `-.slice` is the root, and an
    /// empty dash-separated component is refused (the root case was
    /// unreachable, and `a-.slice` passed as `a.slice/a-.slice`).
    #[test]
    fn systemd_slices_as_runc() {
        let p = CgroupPath::parse("-.slice:cri:abc").unwrap();
        assert_eq!(p.rel(), PathBuf::from("cri-abc.scope"));
        for bad in [
            "a-.slice:p:n",
            "-a.slice:p:n",
            "a--b.slice:p:n",
            ".slice:p:n",
        ] {
            assert!(CgroupPath::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn bad_paths() {
        for bad in [
            "",
            "/",
            "/a/../b",
            "/a/.rund-pool-1",
            "/a/cgroup.procs",
            "a\0b",
        ] {
            assert!(CgroupPath::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
