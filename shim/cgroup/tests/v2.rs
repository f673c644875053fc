//! cgroup v2: the pool and manager against a fake tree (no root needed),
//! then against a real child of the cgroup2 mount when there is one.

mod common;

use common::{read, Gated, TestTree};
use rund_cgroup::fs::FakeFs;
use rund_cgroup::{CgroupConfig, Cgroups, Dirs, Error, FreezerState, Hierarchy, Released};
use std::path::Path;
use std::sync::Arc;

fn fake() -> (tempfile::TempDir, Cgroups) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cg");
    let fs = FakeFs::v2();
    fs.seed_root(&root).unwrap();
    let cfg = CgroupConfig {
        state_dir: tmp.path().join("state"),
        batch: 4,
        low: 2,
        high: 6,
        ..CgroupConfig::default()
    };
    (
        tmp,
        Cgroups::with(Hierarchy::v2_at(&root), Arc::new(fs), cfg),
    )
}

#[test]
fn fake_v2_claim_map_apply_recycle() {
    let (tmp, cg) = fake();
    assert_eq!(cg.pool().warm(Path::new("k8s"), 3).unwrap(), 3);
    let before = cg.fs_counts();
    let r: oci_spec::runtime::LinuxResources =
        serde_json::from_str(r#"{"memory": {"limit": 1048576, "swap": 3145728}, "cpu": {"shares": 1024, "quota": 20000}, "pids": {"limit": 9}}"#)
            .unwrap();
    let m = cg.create("/k8s/c1", Some(&r)).unwrap();
    assert_eq!(
        cg.fs_counts().mkdir - before.mkdir,
        0,
        "mkdir on the warm claim path"
    );
    assert_eq!(cg.fs_counts().rename - before.rename, 0, "v2 never renames");
    assert!(m.pooled());
    let Dirs::V2(d) = m.dirs().clone() else {
        panic!("v2 dirs")
    };
    // Users see the slot name, not the container id, on v2.
    assert!(d
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(".rund-pool-"));
    assert_eq!(read(&d.join("memory.max")), "1048576");
    assert_eq!(read(&d.join("memory.swap.max")), "2097152");
    assert_eq!(read(&d.join("cpu.weight")), "39");
    assert_eq!(read(&d.join("cpu.max")), "20000 100000");
    assert_eq!(read(&d.join("pids.max")), "9");
    // Another process finds the container through the mapping file.
    let again = cg.load("/k8s/c1").unwrap();
    assert_eq!(again.dirs(), m.dirs());
    assert!(matches!(
        cg.create("/k8s/c1", None),
        Err(Error::AlreadyExists(_))
    ));
    m.freeze().unwrap();
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Frozen);
    m.thaw().unwrap();
    assert!(m.cgroup_dir_fd().is_ok());
    assert_eq!(m.destroy().unwrap(), Some(Released::Recycled));
    assert_eq!(
        read(&d.join("memory.max")),
        "max",
        "stale limit after recycle"
    );
    assert_eq!(read(&d.join("cpu.max")), "max 100000");
    assert!(matches!(cg.load("/k8s/c1"), Err(Error::NotFound(_))));
    let st = cg.pool_status().unwrap();
    assert_eq!(
        (st[0].free, st[0].claimed, st[0].counters.recycles),
        (3, 0, 1)
    );
    drop(tmp);
}

#[test]
fn fake_v2_device_rules_are_unimplemented_and_leave_nothing() {
    let (tmp, cg) = fake();
    cg.pool().warm(Path::new("k8s"), 2).unwrap();
    let r: oci_spec::runtime::LinuxResources =
        serde_json::from_str(r#"{"devices": [{"allow": false, "access": "rwm"}]}"#).unwrap();
    let e = cg.create("/k8s/d1", Some(&r)).unwrap_err();
    assert!(e.is_unimplemented(), "{e}");
    // The claimed slot went back; no mapping or claim is left.
    let st = cg.pool_status().unwrap();
    assert_eq!((st[0].free, st[0].claimed), (2, 0));
    assert!(matches!(cg.load("/k8s/d1"), Err(Error::NotFound(_))));
    // An allow-all list is fine (nothing to enforce).
    let ok: oci_spec::runtime::LinuxResources =
        serde_json::from_str(r#"{"devices": [{"allow": true, "access": "rwm"}]}"#).unwrap();
    cg.create("/k8s/d2", Some(&ok)).unwrap().destroy().unwrap();
    drop(tmp);
}

#[test]
fn fake_v2_racing_pools_and_crash_gc() {
    let (tmp, cg) = fake();
    let cg = Arc::new(cg);
    cg.pool().warm(Path::new("p"), 6).unwrap();
    // Separate Cgroups (separate pools) share only the tree and state dir.
    let hier = cg.hierarchy().clone();
    let cfg = cg.config().clone();
    let hs: Vec<_> = (0..4)
        .map(|k| {
            let (hier, cfg) = (hier.clone(), cfg.clone());
            std::thread::spawn(move || {
                let mine = Cgroups::with(hier, Arc::new(FakeFs::v2()), cfg);
                (0..3)
                    .map(|i| mine.create(&format!("/p/t{k}-{i}"), None).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ms: Vec<_> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let pooled: Vec<_> = ms
        .iter()
        .filter(|m| m.pooled())
        .map(|m| m.dirs().clone())
        .collect();
    assert_eq!(pooled.len(), 6, "6 slots, 12 creates: exactly 6 pooled");
    let mut uniq = pooled.clone();
    uniq.dedup();
    uniq.sort_by_key(|d| format!("{d:?}"));
    uniq.dedup();
    assert_eq!(uniq.len(), 6, "a slot was handed out twice");
    for m in &ms {
        m.destroy().unwrap();
    }
    // A crash between the claim file and the mapping: gc releases it once old.
    let st_dir = cfg
        .state_dir
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let slot = cg.pool().free_slots(Path::new("p")).unwrap().remove(0);
    let claim = st_dir.join("claims").join(&slot);
    std::fs::write(&claim, "p%2Fghost").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&claim)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let free_before = cg.pool().free_slots(Path::new("p")).unwrap().len();
    let rep = cg.pool_gc(false).unwrap();
    assert!(rep.removed >= 1, "{rep:?}");
    assert!(!claim.exists());
    assert_eq!(
        cg.pool().free_slots(Path::new("p")).unwrap().len(),
        (free_before + 1).min(6)
    );
    drop(tmp);
}

#[test]
fn real_cgroup2_child_pool_freeze_and_procs() {
    let Some(t) = TestTree::v2() else { return };
    let cg = t.cgroups(t.config());
    if let Err(e) = cg.pool().warm(Path::new("pods"), 2) {
        rund_skip::skip!("cannot make slots on this cgroup2 mount: {e}");
    }
    let m = cg.create("/pods/r1", None).unwrap();
    assert!(m.pooled());
    let mut child = Gated::spawn("sleep 1000");
    m.add_pid(child.pid()).unwrap();
    child.release();
    // sh may have forked sleep by now: the shell must be listed.
    assert!(m.pids().unwrap().contains(&child.pid()));
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", child.pid())).unwrap();
    assert!(own.contains(".rund-pool-"), "{own}");
    if m.dirs().all()[0].join("cgroup.freeze").exists() {
        m.freeze().unwrap();
        assert_eq!(m.freezer_state().unwrap(), FreezerState::Frozen);
        m.thaw().unwrap();
    }
    assert!(m.stats().unwrap().v2);
    let _fd = m.cgroup_dir_fd().unwrap();
    m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    let _ = child.child.wait();
    assert_eq!(m.destroy().unwrap(), Some(Released::Recycled));
    assert_eq!(cg.pool_gc(true).unwrap().removed, 2);
    assert_eq!(common::slots_in(&t.roots[0].join("pods")).len(), 0);
}
