//! `[cgroup] favor_dynmods = true` through real containerd: the first Create turns the kernel's
//! favordynmods on by mounting rund's named hierarchy (`name=rund-dynmods`) under the pool's
//! state dir, once however many containers follow; containers run as before, and no cgroup is
//! made in that hierarchy. When a cgroup mount already has the option, rund mounts nothing.
//!
//! The option is node-wide: the test unmounts the hierarchy when it ends, failed or not.

use std::path::{Path, PathBuf};

use rund_cgroup::dynmods;
use rund_tests::{Containerd, ContainerdOpts, RunSpec, RUND_RUNTIME};

fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Mounts of rund's hierarchy.
fn ours(info: &str) -> Vec<String> {
    info.lines()
        .filter(|l| l.contains(&format!("name={}", dynmods::HIERARCHY)))
        .map(|l| l.split_whitespace().nth(4).unwrap_or_default().to_string())
        .collect()
}

/// Unmounts the hierarchy at the end of the test, failed or not.
struct Release(PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = dynmods::release(&self.0);
    }
}

#[test]
fn favor_dynmods_mounts_its_hierarchy_once() {
    let test = "favor_dynmods_mounts_its_hierarchy_once";
    let already = dynmods::on_in(&mountinfo());
    let scratch = tempfile::tempdir().unwrap();
    let pool_state = scratch.path().join("pool");
    let cfg = scratch.path().join("rund.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = {:?}\n[cgroup]\nfavor_dynmods = true\nstate_dir = {pool_state:?}\n",
            scratch.path().join("state")
        ),
    )
    .unwrap();
    let dir = pool_state.join("dynmods");
    let _release = Release(dir.clone());
    let opts = ContainerdOpts {
        rund_config_path: Some(cfg.clone()),
        ..ContainerdOpts::new()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(test, opts) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    for id in ["dm1", "dm2"] {
        let out = ctd
            .run_spec(&RunSpec {
                id: id.into(),
                rootfs: Some(rootfs.clone()),
                args: vec!["echo".into(), id.into()],
                flags: vec!["--runtime-config-path".into(), cfg.display().to_string()],
                ..RunSpec::new(RUND_RUNTIME)
            })
            .unwrap();
        assert_eq!((out.code(), out.stdout.trim()), (0, id), "{id}: {out:?}");
    }
    let info = mountinfo();
    assert!(dynmods::on_in(&info), "favordynmods is on");
    let mounted = ours(&info);
    if already {
        assert!(
            mounted.is_empty(),
            "nothing mounted when it was on: {mounted:?}"
        );
        return;
    }
    assert_eq!(
        mounted,
        [dir.display().to_string()],
        "one mount of rund's hierarchy, at its place"
    );
    let cgroups: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(cgroups.is_empty(), "no cgroup made there: {cgroups:?}");
    assert!(dynmods::release(&dir).unwrap());
    assert!(ours(&mountinfo()).is_empty());
    assert!(!Path::new(&dir).exists(), "its mount point went too");
}
