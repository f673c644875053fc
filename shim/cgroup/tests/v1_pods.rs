//! The pool as Kubernetes lays cgroups out on v1: one parent per pod, made
//! by the kubelet before the sandbox and removed after it. A pod's cgroup is
//! never batch-filled; the cgroup of a container that exited serves the
//! pod's next one (init -> app -> restart); nothing rund made is left when
//! the pod's last container is gone; and the directory work per pod is at
//! most runc's (mkdir + rmdir of every container in every hierarchy).

mod common;

use common::{read, slots_in, TestTree};
use rund_cgroup::fs::{FakeFs, FsCounts};
use rund_cgroup::{CgroupConfig, Cgroups, Hierarchy, Released, Switch};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the kubelet does before RunPodSandbox: the pod's cgroup in every
/// hierarchy (cpuset filled in, as the kubelet's cgroupfs driver does).
fn make_pod(roots: &[PathBuf], rel: &str) {
    for r in roots {
        let mut cur = r.clone();
        for comp in Path::new(rel).components() {
            cur.push(comp);
            if !cur.exists() {
                // Pods made in parallel share their parents.
                match std::fs::create_dir(&cur) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    r => r.unwrap(),
                }
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    if let Ok(v) = std::fs::read_to_string(cur.parent().unwrap().join(f)) {
                        std::fs::write(cur.join(f), v.trim()).unwrap();
                    }
                }
            }
        }
    }
}

/// What the kubelet does after RemovePodSandbox; fails if anything is left.
fn remove_pod(roots: &[PathBuf], rel: &str) {
    for r in roots {
        let d = r.join(rel);
        let left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "{} still holds {left:?}", d.display());
        std::fs::remove_dir(&d).unwrap_or_else(|e| panic!("kubelet rmdir {}: {e}", d.display()));
    }
}

fn delta(a: FsCounts, b: FsCounts) -> FsCounts {
    FsCounts {
        mkdir: b.mkdir - a.mkdir,
        rmdir: b.rmdir - a.rmdir,
        rename: b.rename - a.rename,
        write: b.write - a.write,
        bpf: b.bpf - a.bpf,
    }
}

/// One kubelet-shaped pod: sandbox, init container, app container, one
/// restart of the app, then teardown. Returns the directory work done.
fn one_pod(cg: &Cgroups, pod: &str) -> (FsCounts, Vec<bool>) {
    let before = cg.fs_counts();
    let sb = cg.create(&format!("/{pod}/sandbox"), None).unwrap();
    let mut pooled = Vec::new();
    for name in ["init", "app", "app-restart"] {
        let c = cg.create(&format!("/{pod}/{name}"), None).unwrap();
        pooled.push(c.pooled());
        c.destroy().unwrap();
    }
    sb.destroy().unwrap();
    (delta(before, cg.fs_counts()), pooled)
}

fn fake_v1(dir: &Path, pool: Switch) -> (Cgroups, Vec<PathBuf>) {
    let hier = Hierarchy::v1_at(&dir.join("cg"), &["devices", "name=a", "name=b", "name=c"]);
    let fs = FakeFs::v1();
    for r in hier.roots() {
        fs.seed_root(&r).unwrap();
    }
    let cfg = CgroupConfig {
        pool,
        state_dir: dir.join("state"),
        ..CgroupConfig::default()
    };
    let roots = hier.roots();
    (Cgroups::with(hier, Arc::new(fs), cfg), roots)
}

fn check_work(on: FsCounts, off: FsCounts, n: u64) {
    // runc (and rund with the pool off): mkdir and rmdir of 4 containers in
    // every hierarchy.
    assert_eq!(
        (off.mkdir, off.rmdir, off.rename),
        (4 * n, 4 * n, 0),
        "{off:?}"
    );
    assert!(
        on.dir_ops() <= off.dir_ops(),
        "pool on {on:?} vs off {off:?}"
    );
    // Only the sandbox and the init container are made; each exit keeps its
    // cgroup with one rename, each reuse renames it in every hierarchy.
    assert_eq!((on.mkdir, on.rmdir), (2 * n, 2 * n), "{on:?}");
    assert_eq!(on.rename, 2 * n + 3, "{on:?}");
}

#[test]
fn fake_kubelet_pod_does_less_dir_work_than_runc() {
    let tmp = tempfile::tempdir().unwrap();
    let (off_cg, roots) = fake_v1(&tmp.path().join("off"), Switch::Off);
    let (on_cg, on_roots) = fake_v1(&tmp.path().join("on"), Switch::On);
    let pod = "kubepods/besteffort/pod1";
    make_pod(&roots, pod);
    make_pod(&on_roots, pod);
    let (off, _) = one_pod(&off_cg, pod);
    let (on, pooled) = one_pod(&on_cg, pod);
    check_work(on, off, on_roots.len() as u64);
    assert_eq!(
        pooled,
        [false, true, true],
        "init is made, app and restart reuse"
    );
    remove_pod(&on_roots, pod);
    remove_pod(&roots, pod);
    assert!(
        !tmp.path().join("on/state").exists(),
        "pod parents have no pool state"
    );
}

#[test]
fn real_kubelet_pod_does_less_dir_work_than_runc() {
    let Some(t) = TestTree::v1() else { return };
    let mut off_cfg = t.config();
    off_cfg.pool = Switch::Off;
    let off_cg = t.cgroups(off_cfg);
    let on_cg = t.cgroups(t.config());
    make_pod(&t.roots, "kubepods/burstable/podA");
    make_pod(&t.roots, "kubepods/burstable/podB");
    let (off, _) = one_pod(&off_cg, "kubepods/burstable/podA");
    let (on, pooled) = one_pod(&on_cg, "kubepods/burstable/podB");
    check_work(on, off, t.roots.len() as u64);
    assert_eq!(pooled, [false, true, true]);
    remove_pod(&t.roots, "kubepods/burstable/podA");
    remove_pod(&t.roots, "kubepods/burstable/podB");
    assert_eq!(std::fs::read_dir(t.state.path()).unwrap().count(), 0);
}

#[test]
fn reuse_inside_a_pod_resets_limits_and_devices() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let pod = "kubepods/podR";
    make_pod(&t.roots, pod);
    let sb = cg.create(&format!("/{pod}/sb"), None).unwrap();
    let init = cg
        .create(
            &format!("/{pod}/init"),
            Some(
                &serde_json::from_str(
                    r#"{"memory": {"limit": 33554432}, "cpu": {"shares": 100}, "pids": {"limit": 3},
                        "devices": [{"allow": false, "access": "rwm"},
                                    {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]}"#,
                )
                .unwrap(),
            ),
        )
        .unwrap();
    let mut child = common::Gated::spawn("true");
    init.add_pid(child.pid()).unwrap();
    child.release();
    let _ = child.child.wait();
    assert_eq!(init.destroy().unwrap(), Some(Released::Kept));
    // Kept: the leader hierarchy shows the marker, the others the old name.
    let leader = t.roots[0].join(pod);
    let marker = format!(".rund-pool~k-{:x}-init", std::process::id());
    assert!(
        leader.join(&marker).is_dir(),
        "{:?}",
        std::fs::read_dir(&leader).unwrap().collect::<Vec<_>>()
    );
    assert!(t.roots[1].join(pod).join("init").is_dir());
    let app = cg.create(&format!("/{pod}/app"), None).unwrap();
    assert!(app.pooled(), "the app container reuses init's cgroup");
    for p in app.paths() {
        assert!(p.is_dir(), "{}", p.display());
    }
    assert!(!leader.join(&marker).exists());
    assert!(!t.roots[1].join(pod).join("init").exists());
    let dir = |c: &str| app.dirs().v1(c).unwrap().to_path_buf();
    assert_eq!(read(&dir("pids").join("pids.max")), "max");
    assert_eq!(read(&dir("cpu").join("cpu.shares")), "1024");
    let fresh_limit = read(
        &t.roots
            .iter()
            .find(|r| r.starts_with("/sys/fs/cgroup/memory"))
            .unwrap()
            .join("memory.limit_in_bytes"),
    );
    assert_eq!(
        read(&dir("memory").join("memory.limit_in_bytes")),
        fresh_limit
    );
    let devices: Vec<String> = read(&dir("devices").join("devices.list"))
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        !devices.iter().any(|l| l.starts_with("c 10:229")),
        "fuse survived the reuse: {devices:?}"
    );
    assert!(devices.contains(&"c 1:3 rwm".to_string()));
    app.destroy().unwrap();
    sb.destroy().unwrap();
    remove_pod(&t.roots, pod);
}

#[test]
fn a_pod_cgroup_is_never_batch_filled_and_warmed_state_goes_with_its_parent() {
    let Some(t) = TestTree::v1() else { return };
    let mut cfg = t.config();
    cfg.low = 4;
    cfg.batch = 8;
    cfg.pool_parents = vec!["/default".into(), "/ctr-ns".into()];
    let cg = Arc::new(t.cgroups(cfg));
    cg.start_refiller();
    make_pod(&t.roots, "kubepods/podN");
    let c = cg.create("/kubepods/podN/c", None).unwrap();
    let l = cg.create("/ctr-ns/c", None).unwrap();
    cg.pool().refiller_idle();
    assert!(
        slots_in(&t.roots[0].join("kubepods/podN")).is_empty(),
        "a pod's cgroup was batch-filled"
    );
    assert_eq!(
        slots_in(&t.roots[0].join("ctr-ns")).len(),
        8,
        "a configured parent is refilled"
    );
    c.destroy().unwrap();
    l.destroy().unwrap();
    remove_pod(&t.roots, "kubepods/podN");
    // Warming makes a parent long-lived; its state goes when it goes.
    make_pod(&t.roots, "burst");
    assert_eq!(cg.pool_warm("/burst", 3).unwrap(), 3);
    let st = cg.pool_status().unwrap();
    assert!(
        st.iter()
            .any(|s| s.parent == Path::new("burst") && !s.configured),
        "{st:?}"
    );
    assert_eq!(cg.pool_gc(true).unwrap().states_removed, 0);
    remove_pod(&t.roots, "burst");
    let rep = cg.pool_gc(false).unwrap();
    assert_eq!(rep.states_removed, 1, "{rep:?}");
    assert!(!cg
        .pool_status()
        .unwrap()
        .iter()
        .any(|s| s.parent == Path::new("burst")));
}

/// Worker half of the crash test: a pod shim that keeps a cgroup and dies.
#[test]
fn pod_worker() {
    let (Ok(roots), Ok(state), Ok(pod)) = (
        std::env::var("RUND_CG_ROOTS"),
        std::env::var("RUND_CG_STATE"),
        std::env::var("RUND_CG_POD"),
    ) else {
        return; // not spawned by the crash test
    };
    let Ok(Hierarchy::V1 { hierarchies, .. }) = Hierarchy::detect() else {
        return;
    };
    let hs = hierarchies
        .into_iter()
        .zip(roots.split(':'))
        .map(|(h, r)| rund_cgroup::V1Hierarchy {
            controllers: h.controllers,
            mount: r.into(),
        })
        .collect();
    let cfg = CgroupConfig {
        state_dir: state.into(),
        ..Default::default()
    };
    let cg = Cgroups::with(
        Hierarchy::V1 {
            hierarchies: hs,
            unified: None,
        },
        Arc::new(rund_cgroup::fs::RealFs),
        cfg,
    );
    let _sb = cg.create(&format!("/{pod}/sandbox"), None).unwrap();
    let app = cg.create(&format!("/{pod}/app"), None).unwrap();
    assert_eq!(app.destroy().unwrap(), Some(Released::Kept));
    println!("KEPT");
    // Crash: the sandbox and the kept cgroup stay behind.
    std::process::exit(0);
}

fn crashed_pod(t: &TestTree, pod: &str) -> u32 {
    make_pod(&t.roots, pod);
    let roots: Vec<String> = t.roots.iter().map(|r| r.display().to_string()).collect();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "pod_worker", "--nocapture", "--test-threads=1"])
        .env("RUND_CG_ROOTS", roots.join(":"))
        .env("RUND_CG_STATE", t.state.path())
        .env("RUND_CG_POD", pod)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("KEPT"),
        "{out:?}"
    );
    let leader = t.roots[0].join(pod);
    let marker = std::fs::read_dir(&leader)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(".rund-pool~k-"))
        .expect("a kept marker");
    u32::from_str_radix(
        marker
            .trim_start_matches(".rund-pool~k-")
            .split('-')
            .next()
            .unwrap(),
        16,
    )
    .unwrap()
}

#[test]
fn a_dead_shims_kept_cgroup_goes_with_shim_delete_or_gc() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    // containerd's `shim delete` of the sandbox: it removes the sandbox and
    // drains the dead shim's kept cgroup.
    let pid = crashed_pod(&t, "kubepods/podC");
    assert_ne!(pid, std::process::id());
    // The followers named "app" are no container: load refuses only while
    // the keeper lives, and it is dead, so load finds them.
    cg.load("/kubepods/podC/sandbox")
        .unwrap()
        .destroy()
        .unwrap();
    remove_pod(&t.roots, "kubepods/podC");
    // `rund pool gc` finds it anywhere in the tree.
    crashed_pod(&t, "kubepods/podD");
    let rep = cg.pool_gc(false).unwrap();
    assert_eq!(rep.removed, t.roots.len(), "{rep:?}");
    cg.load("/kubepods/podD/sandbox")
        .unwrap()
        .destroy()
        .unwrap();
    remove_pod(&t.roots, "kubepods/podD");
}

#[test]
fn a_live_shims_kept_cgroup_is_left_alone() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let other = t.cgroups(t.config());
    make_pod(&t.roots, "kubepods/podL");
    let sb = cg.create("/kubepods/podL/sb", None).unwrap();
    let app = cg.create("/kubepods/podL/app", None).unwrap();
    assert_eq!(app.destroy().unwrap(), Some(Released::Kept));
    // This process is alive: neither gc nor a load from "another shim"
    // (another context) touches the kept cgroup.
    assert_eq!(other.pool_gc(false).unwrap().removed, 0);
    assert!(other.load("/kubepods/podL/app").is_err());
    assert!(t.roots[1].join("kubepods/podL/app").is_dir());
    sb.destroy().unwrap();
    remove_pod(&t.roots, "kubepods/podL");
}

#[test]
fn hundred_kubelet_pods_leave_nothing() {
    let Some(t) = TestTree::v1() else { return };
    let cg = Arc::new(t.cgroups(t.config()));
    cg.start_refiller();
    let before = t.all_dirs().len();
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let (cg, roots) = (cg.clone(), t.roots.clone());
            std::thread::spawn(move || {
                for i in 0..25 {
                    let pod = format!("kubepods/besteffort/pod{k}-{i}");
                    make_pod(&roots, &pod);
                    let (_, pooled) = one_pod(&cg, &pod);
                    assert_eq!(pooled, [false, true, true]);
                    remove_pod(&roots, &pod);
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    cg.pool().refiller_idle();
    // The qos parents the test made stay, as the kubelet's do; nothing else.
    assert_eq!(t.all_dirs().len(), before + 2 * t.roots.len());
    assert_eq!(
        std::fs::read_dir(t.state.path()).unwrap().count(),
        0,
        "pool state left"
    );
}

#[test]
fn rdma_limits_need_the_rdma_hierarchy_on_v1() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let r = serde_json::from_str(r#"{"rdma": {"mlx5_0": {"hcaHandles": 2}}}"#).unwrap();
    let e = cg.create("/default/rd", Some(&r)).unwrap_err();
    let has_rdma = matches!(cg.hierarchy(), Hierarchy::V1 { hierarchies, .. } if hierarchies.iter().any(|h| h.has("rdma")));
    if has_rdma {
        // No such device here: the kernel refuses the line, named in full.
        assert!(
            e.to_string().contains("rdma.max") && e.to_string().contains("mlx5_0 hca_handle=2"),
            "{e}"
        );
    } else {
        assert!(
            matches!(e, rund_cgroup::Error::ControllerMissing("rdma")),
            "{e}"
        );
    }
    assert!(!t.roots[0].join("default/rd").exists());
}

#[test]
fn gc_empties_pod_cgroups_an_older_rund_batch_filled() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    make_pod(&t.roots, "kubepods/podOld");
    assert_eq!(cg.pool_warm("/kubepods/podOld", 5).unwrap(), 5);
    // What an older rund left: the same slots and a state dir whose meta
    // does not say "warmed".
    let st = std::fs::read_dir(t.state.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(st.join("meta.json"), r#"{"rel":"kubepods/podOld"}"#).unwrap();
    // Slots under a parent this state dir does not know are not touched.
    make_pod(&t.roots, "other");
    for r in &t.roots {
        std::fs::create_dir(r.join("other/.rund-pool-foreign")).unwrap();
    }
    let rep = cg.pool_gc(false).unwrap();
    assert_eq!(
        (rep.removed, rep.states_removed),
        (5 * t.roots.len(), 1),
        "{rep:?}"
    );
    assert!(slots_in(&t.roots[0].join("kubepods/podOld")).is_empty());
    assert_eq!(std::fs::read_dir(t.state.path()).unwrap().count(), 0);
    remove_pod(&t.roots, "kubepods/podOld");
    assert_eq!(slots_in(&t.roots[0].join("other")).len(), 1);
    for r in &t.roots {
        std::fs::remove_dir(r.join("other/.rund-pool-foreign")).unwrap();
    }
}
