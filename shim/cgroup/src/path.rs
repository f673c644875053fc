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
    /// * systemd style `slice:prefix:name` is expanded exactly as runc's
    ///   systemd driver expands it: `kubepods-besteffort-pod1.slice:cri:abc`
    ///   gives `kubepods.slice/kubepods-besteffort.slice/
    ///   kubepods-besteffort-pod1.slice/cri-abc.scope`; an empty slice is
    ///   `system.slice`, `-.slice` is the root, and a name ending in `.slice`
    ///   is used as it is. rund makes the result through cgroupfs; it does
    ///   not ask systemd for a scope.
    pub fn parse(raw: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidPath {
            path: raw.to_string(),
            reason: reason.to_string(),
        };
        if raw.contains('\0') || raw.contains('\n') {
            return Err(bad("contains a NUL or newline"));
        }
        let parts: Vec<String> = if !raw.contains('/') && raw.matches(':').count() == 2 {
            let f: Vec<&str> = raw.split(':').collect();
            let (slice, prefix, name) = (f[0], f[1], f[2]);
            let slice = if slice.is_empty() {
                "system.slice"
            } else {
                slice
            };
            let mut parts = expand_slice(slice).map_err(|r| bad(&r))?;
            parts.push(unit_name(prefix, name));
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

/// runc's unit name: a scope unless the name asks for a slice.
fn unit_name(prefix: &str, name: &str) -> String {
    if name.ends_with(".slice") {
        name.to_string()
    } else {
        format!("{prefix}-{name}.scope")
    }
}

/// runc's `ExpandSlice`: `a-b-c.slice` lives at
/// `a.slice/a-b.slice/a-b-c.slice`, and `-.slice` is the root.
fn expand_slice(slice: &str) -> std::result::Result<Vec<String>, String> {
    const SUFFIX: &str = ".slice";
    let invalid = || format!("invalid slice name {slice:?}");
    if slice.len() < SUFFIX.len() || !slice.ends_with(SUFFIX) || slice.contains('/') {
        return Err(invalid());
    }
    let name = &slice[..slice.len() - SUFFIX.len()];
    if name == "-" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut prefix = String::new();
    for comp in name.split('-') {
        // test--a.slice and -test.slice are not slices.
        if comp.is_empty() {
            return Err(invalid());
        }
        out.push(format!("{prefix}{comp}{SUFFIX}"));
        prefix.push_str(comp);
        prefix.push('-');
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

    fn rel(p: &str) -> String {
        CgroupPath::parse(p).unwrap().rel().display().to_string()
    }

    #[test]
    fn systemd_form() {
        assert_eq!(
            rel("kubepods-besteffort-pod1.slice:cri-containerd:abc"),
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope"
        );
        assert_eq!(rel(":docker:abc"), "system.slice/docker-abc.scope");
        // runc joins prefix and name with '-' even when the prefix is empty.
        assert_eq!(rel("system.slice::abc"), "system.slice/-abc.scope");
        assert_eq!(rel("-.slice:p:abc"), "p-abc.scope");
        assert_eq!(rel("a-b.slice:p:c.slice"), "a.slice/a-b.slice/c.slice");
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
    fn runc_expand_slice_cases() {
        for (input, want) in [
            ("-.slice", Some("")),
            ("machine.slice", Some("machine.slice")),
            ("machine-lxc.slice", Some("machine.slice/machine-lxc.slice")),
            (
                "machine-lxc-1.slice",
                Some("machine.slice/machine-lxc.slice/machine-lxc-1.slice"),
            ),
            ("-test.slice", None),
            ("test--a.slice", None),
            ("test-.slice", None),
            (".slice", None),
            ("slice", None),
            ("test.scope", None),
            ("a/b.slice", None),
        ] {
            let got = expand_slice(input).ok().map(|v| v.join("/"));
            assert_eq!(got.as_deref(), want, "{input}");
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
