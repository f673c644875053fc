//! The container's view of /sys/fs/cgroup: its own cgroup only, as runc
//! gives it. On cgroup v1 runc mounts a tmpfs and binds, per hierarchy, the
//! container's own cgroup dir at `<dest>/<hierarchy>`; rund writes that
//! into the spec (the shim knows the dirs, the agent never sees host paths)
//! and clones each dir as a bind tree. Comounted controllers
//! (`cpu,cpuacct`), which runc exposes as symlinks, are extra binds of the
//! same dir. On v2 the agent mounts a fresh cgroup2 inside the container's
//! cgroup namespace; in a user namespace, where that namespace is rooted
//! elsewhere, the container's own dir is bound instead (runc's fallback).

use std::path::{Path, PathBuf};

use oci_spec::runtime::{Mount, MountBuilder, Spec};
use rund_cgroup::Dirs;

/// Where the container's cgroup lives on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnCgroup {
    /// Per v1 hierarchy: its dir name under /sys/fs/cgroup (the host's
    /// mount point's name), and the container's dir in it.
    V1(Vec<(String, PathBuf)>),
    V2(PathBuf),
}

impl OwnCgroup {
    pub fn of(dirs: &Dirs) -> Self {
        match dirs {
            Dirs::V1(v) => OwnCgroup::V1(
                v.iter()
                    .map(|(h, d)| {
                        let name = h
                            .mount
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_else(|| h.name());
                        (name, d.clone())
                    })
                    .collect(),
            ),
            Dirs::V2(d) => OwnCgroup::V2(d.clone()),
        }
    }
}

fn is_cgroup(m: &Mount) -> bool {
    matches!(m.typ().as_deref(), Some("cgroup" | "cgroup2"))
}

fn is_propagation(o: &str) -> bool {
    super::namespaced::PROPAGATIONS.contains(&o)
}

fn mount(dest: &Path, typ: &str, source: &Path, options: Vec<String>) -> Mount {
    MountBuilder::default()
        .destination(dest.to_path_buf())
        .typ(typ)
        .source(source.to_path_buf())
        .options(options)
        .build()
        .expect("every field is set")
}

fn bind(dest: PathBuf, src: &Path, opts: &[String]) -> Mount {
    let mut o = vec!["rbind".to_string()];
    o.extend(opts.iter().filter(|o| !o.contains('=')).cloned());
    mount(&dest, "bind", src, o)
}

/// Rewrites the spec's cgroup mounts into binds of the container's own
/// cgroup. Returns the indices of the binds it wrote: they are cloned
/// plainly (a cgroup filesystem is not idmapped).
pub fn expand(spec: &mut Spec, own: &OwnCgroup, userns: bool) -> Vec<usize> {
    let Some(mounts) = spec.mounts().clone() else {
        return Vec::new();
    };
    if !mounts.iter().any(is_cgroup) {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(mounts.len());
    let mut binds = Vec::new();
    for m in mounts {
        if !is_cgroup(&m) {
            out.push(m);
            continue;
        }
        let dest = m.destination().clone();
        let opts = m.options().clone().unwrap_or_default();
        match own {
            OwnCgroup::V2(_) if !userns => out.push(m),
            OwnCgroup::V2(dir) => {
                binds.push(out.len());
                out.push(bind(dest, dir, &opts));
            }
            OwnCgroup::V1(dirs) => {
                let mut tmpfs: Vec<String> = ["nosuid", "nodev", "noexec", "mode=755"]
                    .map(String::from)
                    .into();
                tmpfs.extend(opts.iter().filter(|o| is_propagation(o)).cloned());
                out.push(mount(&dest, "tmpfs", Path::new("tmpfs"), tmpfs));
                for (name, dir) in dirs {
                    let mut names = vec![name.clone()];
                    if name.contains(',') {
                        names.extend(name.split(',').map(String::from));
                    }
                    for n in names {
                        binds.push(out.len());
                        out.push(bind(dest.join(n), dir, &opts));
                    }
                }
            }
        }
    }
    spec.set_mounts(Some(out));
    binds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;

    fn spec() -> Spec {
        parse(
            br#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["x"],"cwd":"/"},"root":{"path":"r"},
            "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
                      {"destination":"/sys/fs/cgroup","type":"cgroup","source":"cgroup","options":["nosuid","noexec","nodev","relatime","ro","rslave"]},
                      {"destination":"/data","type":"bind","source":"/d","options":["rbind"]}]}"#,
        )
        .unwrap()
    }

    fn summary(s: &Spec) -> Vec<String> {
        s.mounts()
            .iter()
            .flatten()
            .map(|m| {
                format!(
                    "{} {} {} {}",
                    m.destination().display(),
                    m.typ().as_deref().unwrap_or(""),
                    m.source()
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    m.options().clone().unwrap_or_default().join(",")
                )
            })
            .collect()
    }

    #[test]
    fn v1_binds_the_containers_own_dir_per_hierarchy() {
        let mut s = spec();
        let own = OwnCgroup::V1(vec![
            (
                "cpu,cpuacct".into(),
                "/sys/fs/cgroup/cpu,cpuacct/default/c1".into(),
            ),
            ("memory".into(), "/sys/fs/cgroup/memory/default/c1".into()),
        ]);
        let binds = expand(&mut s, &own, false);
        assert_eq!(binds, [2, 3, 4, 5]);
        let o = "rbind,nosuid,noexec,nodev,relatime,ro,rslave";
        assert_eq!(
            summary(&s),
            [
                "/proc proc proc ".to_string(),
                "/sys/fs/cgroup tmpfs tmpfs nosuid,nodev,noexec,mode=755,rslave".into(),
                format!(
                    "/sys/fs/cgroup/cpu,cpuacct bind /sys/fs/cgroup/cpu,cpuacct/default/c1 {o}"
                ),
                format!("/sys/fs/cgroup/cpu bind /sys/fs/cgroup/cpu,cpuacct/default/c1 {o}"),
                format!("/sys/fs/cgroup/cpuacct bind /sys/fs/cgroup/cpu,cpuacct/default/c1 {o}"),
                format!("/sys/fs/cgroup/memory bind /sys/fs/cgroup/memory/default/c1 {o}"),
                "/data bind /d rbind".into(),
            ]
        );
    }

    #[test]
    fn v2_keeps_the_mount_unless_in_a_user_namespace() {
        let own = OwnCgroup::V2("/sys/fs/cgroup/default/c1".into());
        let mut s = spec();
        assert!(expand(&mut s, &own, false).is_empty());
        assert_eq!(summary(&s), summary(&spec()));
        let binds = expand(&mut s, &own, true);
        assert_eq!(binds, [1]);
        assert!(summary(&s)[1].starts_with("/sys/fs/cgroup bind /sys/fs/cgroup/default/c1 rbind,"));
    }

    #[test]
    fn specs_without_cgroup_mounts_are_left_alone() {
        let mut s = parse(
            br#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["x"],"cwd":"/"},"root":{"path":"r"}}"#,
        )
        .unwrap();
        assert!(expand(&mut s, &OwnCgroup::V2("/x".into()), true).is_empty());
        assert!(s.mounts().is_none());
    }
}
