//! The node-wide pool on real cgroup v1 hierarchies.

mod common;

use common::{assert_slots_consistent, containers_left, read, slots_in, TestTree};
use rund_cgroup::{Cgroups, Released, Switch};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

#[test]
fn warm_claim_makes_no_mkdir() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    assert_eq!(cg.pool().warm(Path::new("default"), 4).unwrap(), 4);
    assert_eq!(assert_slots_consistent(&t, "default"), 4);
    let before = cg.fs_counts();
    let m = cg.create("/default/c1", None).unwrap();
    let after = cg.fs_counts();
    assert!(m.pooled());
    assert_eq!(
        after.mkdir - before.mkdir,
        0,
        "mkdir on the warm claim path"
    );
    assert_eq!(after.rename - before.rename, t.roots.len() as u64);
    assert_eq!(assert_slots_consistent(&t, "default"), 3);
    // With the pool off the same create costs one mkdir per hierarchy.
    let mut cfg = t.config();
    cfg.pool = Switch::Off;
    let off = t.cgroups(cfg);
    let b = off.fs_counts();
    let m2 = off.create("/default/c2", None).unwrap();
    assert!(!m2.pooled());
    assert_eq!(off.fs_counts().mkdir - b.mkdir, t.roots.len() as u64);
    m2.destroy().unwrap();
    assert_eq!(m.destroy().unwrap(), Some(Released::Recycled));
    assert_eq!(assert_slots_consistent(&t, "default"), 4);
}

#[test]
fn recycled_cgroup_keeps_no_stale_limits() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    // A fresh sibling shows the defaults a new child of this parent gets.
    let mut cfg = t.config();
    cfg.pool = Switch::Off;
    let fresh = t.cgroups(cfg).create("/default/fresh", None).unwrap();
    cg.pool().warm(Path::new("default"), 1).unwrap();
    let r: oci_spec::runtime::LinuxResources = serde_json::from_str(
        r#"{"memory": {"limit": 33554432, "reservation": 1048576, "swap": 67108864, "swappiness": 5, "disableOOMKiller": true},
            "cpu": {"shares": 100, "quota": 10000, "period": 50000, "cpus": "0"},
            "pids": {"limit": 3},
            "blockIO": {"throttleWriteIopsDevice": [{"major": 254, "minor": 0, "rate": 100}]},
            "devices": [{"allow": false, "access": "rwm"}]}"#,
    )
    .unwrap();
    let a = cg.create("/default/a", Some(&r)).unwrap();
    assert!(a.pooled());
    a.freeze().unwrap();
    a.thaw().unwrap();
    assert_eq!(a.destroy().unwrap(), Some(Released::Recycled));
    let b = cg.create("/default/b", None).unwrap();
    assert!(b.pooled(), "b should get a's recycled slot");
    let files = [
        ("memory", "memory.limit_in_bytes"),
        ("memory", "memory.soft_limit_in_bytes"),
        ("memory", "memory.memsw.limit_in_bytes"),
        ("memory", "memory.swappiness"),
        ("memory", "memory.oom_control"),
        ("cpu", "cpu.shares"),
        ("cpu", "cpu.cfs_quota_us"),
        ("cpu", "cpu.cfs_period_us"),
        ("cpuset", "cpuset.cpus"),
        ("cpuset", "cpuset.mems"),
        ("pids", "pids.max"),
        ("blkio", "blkio.throttle.write_iops_device"),
        ("freezer", "freezer.state"),
    ];
    for (c, f) in files {
        let got = read(&b.dirs().v1(c).unwrap().join(f));
        let want = read(&fresh.dirs().v1(c).unwrap().join(f));
        // oom_control also reports live counters; compare the setting only.
        let norm = |s: &str| s.lines().next().unwrap_or("").to_string();
        assert_eq!(norm(&got), norm(&want), "{c}/{f} kept a stale value");
    }
    // Devices are deny-by-default again for b, from b's own apply.
    assert!(read(&b.dirs().v1("devices").unwrap().join("devices.list")).contains("c 1:3 rwm"));
    b.destroy().unwrap();
    fresh.destroy().unwrap();
}

#[test]
fn two_hundred_containers_leak_nothing() {
    let Some(t) = TestTree::v1() else { return };
    let mut cfg = t.config();
    cfg.batch = 16;
    cfg.low = 8;
    cfg.high = 40;
    let cg = Arc::new(t.cgroups(cfg));
    cg.start_refiller();
    cg.pool().warm(Path::new("default"), 32).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let cg = cg.clone();
            std::thread::spawn(move || {
                let mut ms = Vec::new();
                for i in 0..25 {
                    ms.push(
                        cg.create(&format!("/default/t{k}-{i}"), None)
                            .expect("create"),
                    );
                }
                let pooled = ms.iter().filter(|m| m.pooled()).count();
                for m in ms {
                    m.destroy().expect("destroy");
                }
                pooled
            })
        })
        .collect();
    let pooled: usize = threads.into_iter().map(|h| h.join().unwrap()).sum();
    cg.pool().refiller_idle();
    assert!(pooled > 0);
    assert_eq!(containers_left(&t, "default"), Vec::<String>::new());
    // Racing recycles may overshoot high water by a few; gc trims exactly.
    let free = assert_slots_consistent(&t, "default");
    assert!(free <= 40 + 8, "{free} free slots, far past high water");
    cg.pool_gc(false).unwrap();
    let free = assert_slots_consistent(&t, "default");
    assert!(free <= 40, "{free} free slots after gc, past high water");
    let st = cg.pool_status().unwrap();
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].free, free);
    assert_eq!(st[0].claimed, 0);
    let c = st[0].counters;
    assert_eq!(c.recycles + c.removed, 200, "{c:?}");
    assert!(c.refills >= 1);
    let rep = cg.pool_gc(true).unwrap();
    assert_eq!(rep.removed, free * t.roots.len());
    assert_eq!(assert_slots_consistent(&t, "default"), 0);
}

/// Worker half of the cross-process race: claims names given in env vars.
#[test]
fn the_refiller_thread_starts_with_the_first_refill_request() {
    let Some(t) = TestTree::v1() else { return };
    let mut cfg = t.config();
    cfg.batch = 8;
    cfg.low = 4;
    cfg.high = 16;
    let cg = Arc::new(t.cgroups(cfg));
    cg.start_refiller();
    cg.pool().warm(Path::new("default"), 8).unwrap();
    assert!(!cg.pool().refiller_running(), "a thread before any request");
    // Claims that see more than `low` free slots ask for nothing.
    let mut ms: Vec<_> = (0..4)
        .map(|i| cg.create(&format!("/default/r{i}"), None).unwrap())
        .collect();
    assert!(ms.iter().all(|m| m.pooled()));
    assert!(!cg.pool().refiller_running(), "started above low water");
    // This claim sees `low` free slots: the refiller starts and tops up.
    ms.push(cg.create("/default/r4", None).unwrap());
    assert!(cg.pool().refiller_running(), "not started at low water");
    cg.pool().refiller_idle();
    let free = assert_slots_consistent(&t, "default");
    assert!(free >= 4, "{free} free slots after the refill");
    for m in ms {
        m.destroy().unwrap();
    }
    assert_eq!(containers_left(&t, "default"), Vec::<String>::new());
}

#[test]
fn race_worker() {
    let (Ok(roots), Ok(state), Ok(prefix)) = (
        std::env::var("RUND_CG_ROOTS"),
        std::env::var("RUND_CG_STATE"),
        std::env::var("RUND_CG_PREFIX"),
    ) else {
        return; // not spawned by the race test
    };
    let Some(rund_cgroup::Hierarchy::V1 { hierarchies, .. }) =
        rund_cgroup::Hierarchy::detect().ok()
    else {
        return;
    };
    let roots: Vec<&str> = roots.split(':').collect();
    let hs = hierarchies
        .into_iter()
        .zip(roots)
        .map(|(h, r)| rund_cgroup::V1Hierarchy {
            controllers: h.controllers,
            mount: r.into(),
        })
        .collect();
    let hier = rund_cgroup::Hierarchy::V1 {
        hierarchies: hs,
        unified: None,
    };
    let cfg = rund_cgroup::CgroupConfig {
        state_dir: state.into(),
        ..Default::default()
    };
    let cg = Cgroups::with(hier, Arc::new(rund_cgroup::fs::RealFs), cfg);
    for i in 0..10 {
        let m = cg
            .create(&format!("/default/{prefix}-{i}"), None)
            .expect("worker create");
        println!("CLAIM {} {}", m.path().name(), m.pooled());
    }
}

#[test]
fn claims_racing_across_processes_never_share_a_slot() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    cg.pool().warm(Path::new("default"), 60).unwrap();
    let roots: Vec<String> = t.roots.iter().map(|r| r.display().to_string()).collect();
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..6)
        .map(|k| {
            std::process::Command::new(&exe)
                .args(["--exact", "race_worker", "--nocapture", "--test-threads=1"])
                .env("RUND_CG_ROOTS", roots.join(":"))
                .env("RUND_CG_STATE", t.state.path())
                .env("RUND_CG_PREFIX", format!("w{k}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pooled = 0;
    let mut names = BTreeSet::new();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success());
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            // The harness may print "test race_worker ... " on the same line.
            if let Some(rest) = l.find("CLAIM ").map(|i| &l[i + 6..]) {
                let (n, p) = rest.split_once(' ').unwrap();
                assert!(names.insert(n.to_string()));
                pooled += usize::from(p == "true");
            }
        }
    }
    assert_eq!(names.len(), 60);
    // 60 slots, 60 pooled claims: a slot given twice would leave one spare.
    let free = assert_slots_consistent(&t, "default");
    assert_eq!(free + pooled, 60, "free {free} + pooled {pooled}");
    for n in &names {
        for r in &t.roots {
            assert!(
                r.join("default").join(n).is_dir(),
                "{n} missing in {}",
                r.display()
            );
        }
    }
    for n in &names {
        cg.load(&format!("/default/{n}"))
            .unwrap()
            .destroy()
            .unwrap();
    }
    assert_eq!(containers_left(&t, "default"), Vec::<String>::new());
}

#[test]
fn crash_leftovers_are_found_by_gc() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    cg.pool().warm(Path::new("default"), 3).unwrap();
    let slots = slots_in(&t.roots[0].join("default"));
    // A shim died right after winning the leader rename.
    std::fs::rename(
        t.roots[0].join("default").join(&slots[0]),
        t.roots[0].join("default/crashed"),
    )
    .unwrap();
    // A refill died half-way: a slot only in the last follower.
    let last = t.roots.last().unwrap();
    std::fs::create_dir(last.join("default/.rund-pool-halfmade")).unwrap();
    let rep = cg.pool_gc(false).unwrap();
    assert_eq!(rep.removed, t.roots.len() - 1 + 1, "{rep:?}");
    assert_eq!(assert_slots_consistent(&t, "default"), 2);
    // containerd's `shim delete` then removes the half-claimed container.
    cg.load("/default/crashed").unwrap().destroy().unwrap();
    assert_eq!(containers_left(&t, "default"), Vec::<String>::new());
    // A claim that finds a follower missing still completes (mkdir there).
    let slots = slots_in(&t.roots[0].join("default"));
    for s in &slots {
        std::fs::remove_dir(t.roots[1].join("default").join(s)).unwrap();
    }
    let m = cg.create("/default/partial", None).unwrap();
    assert!(m.pooled());
    for p in m.paths() {
        assert!(p.is_dir());
    }
    m.destroy().unwrap();
}

#[test]
fn pool_warm_fills_to_the_target_capped_at_high_water() {
    let Some(t) = TestTree::v1() else { return };
    let mut cfg = t.config();
    cfg.high = 6;
    cfg.batch = 4;
    let cg = t.cgroups(cfg.clone());
    assert_eq!(cg.pool_warm("/burst", 5).unwrap(), 5);
    assert_eq!(assert_slots_consistent(&t, "burst"), 5);
    // Already warm: only the missing slot is made, and never past high.
    assert_eq!(cg.pool_warm("/burst", 100).unwrap(), 1);
    assert_eq!(assert_slots_consistent(&t, "burst"), 6);
    let st = cg.pool_status().unwrap();
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!((st[0].free, st[0].counters.slots_created), (6, 6));

    assert!(cg.pool_warm("/burst/../x", 1).is_err(), "'..' refused");
    cfg.pool = Switch::Off;
    let off = t.cgroups(cfg);
    let e = off.pool_warm("/other", 3).unwrap_err();
    assert!(e.to_string().contains("pool is off"), "{e}");
    assert!(!t.roots[0].join("other").exists(), "pool off made a parent");
}

fn device_list(m: &rund_cgroup::CgroupManager) -> BTreeSet<String> {
    read(&m.dirs().v1("devices").unwrap().join("devices.list"))
        .lines()
        .map(str::to_string)
        .collect()
}

fn baseline() -> BTreeSet<String> {
    rund_cgroup::resources::DEFAULT_ALLOWED_DEVICES
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn slots_hold_the_device_baseline_and_claims_only_add_to_it() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    cg.pool().warm(Path::new("default"), 2).unwrap();
    let gpu: oci_spec::runtime::LinuxResources = serde_json::from_str(
        r#"{"devices": [{"allow": false, "access": "rwm"},
                        {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
                        {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rw"}]}"#,
    )
    .unwrap();
    let before = cg.fs_counts();
    let a = cg.create("/default/a", Some(&gpu)).unwrap();
    assert!(a.pooled());
    // One write: the allow beyond the baseline (null is already in it).
    assert_eq!(cg.fs_counts().write - before.write, 1);
    let mut want = baseline();
    want.insert("c 195:0 rw".into());
    assert_eq!(device_list(&a), want);
    // Recycling puts the baseline back: the next tenant does not inherit 195:0.
    assert_eq!(a.destroy().unwrap(), Some(Released::Recycled));
    let b = cg.create("/default/b", None).unwrap();
    assert!(b.pooled());
    assert_eq!(device_list(&b), baseline());
    // A deny other than the leading deny-all needs the whole order.
    let deny: oci_spec::runtime::LinuxResources = serde_json::from_str(
        r#"{"devices": [{"allow": false, "type": "c", "major": 1, "minor": 3, "access": "rwm"}]}"#,
    )
    .unwrap();
    let c = cg.create("/default/c", Some(&deny)).unwrap();
    assert!(c.pooled());
    assert_eq!(
        device_list(&c),
        baseline(),
        "defaults come after the spec's rules"
    );
    b.destroy().unwrap();
    c.destroy().unwrap();
}

#[test]
fn a_slot_without_the_baseline_is_never_trusted() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    cg.pool().warm(Path::new("default"), 1).unwrap();
    // What a slot made by an older rund looks like: everything allowed.
    let slot = slots_in(&t.roots[0].join("default")).pop().unwrap();
    let dev = t
        .roots
        .iter()
        .find(|r| r.starts_with("/sys/fs/cgroup/devices"))
        .expect("devices hierarchy")
        .join("default")
        .join(&slot);
    std::fs::write(dev.join("devices.allow"), "a").unwrap();
    let m = cg.create("/default/old", None).unwrap();
    assert!(m.pooled());
    assert_eq!(device_list(&m), baseline(), "allow-all survived the claim");
    m.destroy().unwrap();
}
