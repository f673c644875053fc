mod deploy_yaml;
mod edits;
mod flow;
mod render;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A node in a temp dir: a source dir with fake rund binaries, a prefix, an etc dir.
pub struct Node {
    pub dir: tempfile::TempDir,
}

impl Node {
    pub fn new() -> Node {
        let n = Node {
            dir: tempfile::tempdir().unwrap(),
        };
        let from = n.from();
        std::fs::create_dir_all(&from).unwrap();
        for (name, mode) in [
            ("containerd-shim-rund-v2", 0o755),
            ("rund-agent", 0o755),
            ("rund", 0o755),
            ("rund-init", 0o755),
            ("rund-bench", 0o755),
            ("rund-probe", 0o755),
            ("rund-agent.d", 0o644),
        ] {
            let p = from.join(name);
            std::fs::write(&p, format!("#!/bin/true {name}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::create_dir_all(n.etc()).unwrap();
        n
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub fn from(&self) -> PathBuf {
        self.path("build")
    }
    pub fn prefix(&self) -> PathBuf {
        self.path("usr/local")
    }
    pub fn etc(&self) -> PathBuf {
        self.path("etc/containerd")
    }
    pub fn config(&self) -> PathBuf {
        self.etc().join("config.toml")
    }
    pub fn rund_config(&self) -> PathBuf {
        self.path("etc/rund/config.toml")
    }
    pub fn manifest(&self) -> PathBuf {
        self.path("var/lib/rund/install-manifest.json")
    }
    pub fn args(&self, version: &str) -> super::InstallArgs {
        super::InstallArgs {
            prefix: self.prefix(),
            containerd_config: self.config(),
            rund_config: Some(self.rund_config()),
            manifest: self.manifest(),
            from: Some(self.from()),
            containerd_version: Some(version.into()),
            containerd_bin: "/nonexistent/containerd".into(),
            dry_run: false,
            restart: false,
        }
    }
    pub fn uninstall_args(&self) -> super::UninstallArgs {
        super::UninstallArgs {
            manifest: self.manifest(),
            dry_run: false,
            restart: false,
            containerd_config: self.config(),
        }
    }
    /// Every file under the node, with its content (to show a dry run changed nothing).
    pub fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        fn walk(d: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            let mut es: Vec<_> = std::fs::read_dir(d).unwrap().flatten().collect();
            es.sort_by_key(|e| e.path());
            for e in es {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut v = Vec::new();
        walk(self.dir.path(), &mut v);
        v
    }
}

/// Run `rund install` with `args`; (exit status, output).
pub fn install(a: &super::InstallArgs) -> (Result<i32, super::InstallError>, String) {
    let mut out = Vec::new();
    let r = super::install(a, None, &mut out);
    (r, String::from_utf8(out).unwrap())
}

pub fn uninstall(a: &super::UninstallArgs) -> (Result<i32, super::InstallError>, String) {
    let mut out = Vec::new();
    let r = super::uninstall(a, &mut out);
    (r, String::from_utf8(out).unwrap())
}
