//! The cgroup pool through containerd 1.6 and ctr: containers started at once claim the pre-made slots of
//! the node-wide cgroup pool (no new slot is made while the pool is warm), each container's
//! devices cgroup holds exactly deny-all plus the defaults, `[trace] phases_file` records every
//! Create's cgroup phase, and delete recycles every slot. Bad pool input fails clearly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rund_tests::fsview::cgroup_children as children;
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, Containerd, ContainerdOpts, LeakSnapshot, RunSpec,
    RUND_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);

struct Pool {
    cli: PathBuf,
    config: PathBuf,
    phases: PathBuf,
    parent: String,
}

impl Pool {
    fn new(ctd: &Containerd, cli: PathBuf) -> Pool {
        let config = ctd.dir.join("pool.toml");
        let phases = ctd.dir.join("phases.jsonl");
        let text = format!(
            "[cgroup]\npool = \"on\"\nlow = 2\nhigh = 16\nbatch = 4\nstate_dir = {:?}\n\
             [trace]\nphases_file = {:?}\n",
            ctd.dir.join("pool-state"),
            phases
        );
        std::fs::write(&config, text).unwrap();
        Pool {
            cli,
            config,
            phases,
            parent: format!("/{}", ctd.namespace),
        }
    }

    fn rund(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.cli)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .output()
            .unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let o = self.rund(&["pool", "status", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["pools"][0].clone()
    }
}

fn memory_dir(parent: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup/memory").join(parent.trim_start_matches('/'))
}

fn slots(parent: &str) -> BTreeSet<String> {
    std::fs::read_dir(memory_dir(parent))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".rund-pool-"))
                .collect()
        })
        .unwrap_or_default()
}

/// containerd with rund, a busybox rootfs, the pool config and a leak snapshot.
fn setup(test: &str) -> Option<(Containerd, PathBuf, Pool, LeakSnapshot)> {
    let bins = rund_bins_or_skip(test)?;
    let ctd = Containerd::start_rund_or_skip(test, ContainerdOpts::new())?;
    let rootfs = ctd.busybox_rootfs().unwrap();
    let pool = Pool::new(&ctd, bins.path("rund"));
    let before = LeakSnapshot::take(&ctd);
    Some((ctd, rootfs, pool, before))
}

fn v1_memory_present() -> bool {
    Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists()
}

#[test]
fn concurrent_starts_claim_warm_slots_and_delete_recycles_them() {
    let test = "concurrent_starts_claim_warm_slots_and_delete_recycles_them";
    if !v1_memory_present() {
        rund_tests::skip!("needs the cgroup v1 memory hierarchy (this test reads it)");
    }
    let Some((ctd, rootfs, pool, before)) = setup(test) else {
        return;
    };

    let o = pool.rund(&["pool", "warm", &pool.parent, "--slots", "8"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let warm = slots(&pool.parent);
    assert_eq!(warm.len(), 8, "{warm:?}");

    let ids: Vec<String> = (0..4).map(|i| format!("pool-{i}")).collect();
    let specs: Vec<RunSpec> = ids
        .iter()
        .map(|id| RunSpec {
            id: id.clone(),
            rootfs: Some(rootfs.clone()),
            args: vec!["sleep".into(), "1000".into()],
            detach: true,
            flags: vec![
                "--runtime-config-path".into(),
                pool.config.display().to_string(),
            ],
            ..RunSpec::new(RUND_RUNTIME)
        })
        .collect();
    // All four at once: racing claims must each get their own slot.
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .iter()
            .map(|spec| s.spawn(|| ctd.run_spec(spec)))
            .collect();
        for h in handles {
            let r = h.join().unwrap().unwrap();
            assert!(r.success(), "{r:?}");
        }
    });

    // Four slots were claimed by rename (their names are gone) and none was made: low water
    // (2) was not crossed, so the refiller did not run.
    let left = slots(&pool.parent);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left.is_subset(&warm), "new slots appeared: {left:?}");
    let st = pool.status();
    assert_eq!(st["claimed"], 4, "{st}");
    assert_eq!(
        st["counters"]["refills"], 1,
        "only the warm-up refilled: {st}"
    );

    let want: BTreeSet<String> = rund_cgroup::resources::DEFAULT_ALLOWED_DEVICES
        .iter()
        .map(|s| s.to_string())
        .collect();
    for id in &ids {
        let dir = Path::new("/sys/fs/cgroup/devices")
            .join(pool.parent.trim_start_matches('/'))
            .join(id);
        let list: BTreeSet<String> = std::fs::read_to_string(dir.join("devices.list"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(list, want, "{id}: devices beyond the baseline");
    }

    let text = std::fs::read_to_string(&pool.phases).unwrap();
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: BTreeSet<&str> = recs.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(
        seen,
        ids.iter().map(String::as_str).collect(),
        "one record per Create"
    );
    for r in &recs {
        let cg = r["phases"]["cgroup"].as_f64().unwrap();
        let total = r["total"].as_f64().unwrap();
        assert!(cg > 0.0 && cg < total, "{r}");
        assert!(r["extra"]["cgroup_cpu"].as_f64().unwrap() > 0.0, "{r}");
        // Made in the background: its own time, beside the critical path's wait for it.
        // A head start begins `cgroup_lead` before the Create, so its making may outlast
        // the Create itself, but not the lead and the Create together.
        let made = r["extra"]["cgroup_made"].as_f64().unwrap();
        let lead = r["extra"]["cgroup_lead"].as_f64().unwrap_or(0.0);
        assert!(made > 0.0 && made < lead + total, "{r}");
    }

    for id in &ids {
        ctd.remove_container(id);
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
    let st = pool.status();
    assert_eq!(st["counters"]["recycles"], 4, "{st}");
    assert_eq!(
        (st["free"].as_u64(), st["claimed"].as_u64()),
        (Some(8), Some(0))
    );
    let o = pool.rund(&["pool", "gc", "--drain"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(slots(&pool.parent).is_empty());
}

#[test]
fn bad_pool_input_fails_clearly_and_leaves_nothing() {
    let test = "bad_pool_input_fails_clearly_and_leaves_nothing";
    let Some((ctd, rootfs, pool, before)) = setup(test) else {
        return;
    };

    let o = pool.rund(&["pool", "warm", "/x/../y"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("'..'"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A config with a misspelt pool key fails the Create with the key named.
    let bad = ctd.dir.join("bad.toml");
    std::fs::write(&bad, "[cgroup]\npol = \"on\"\n").unwrap();
    let out = ctd
        .run_spec(&RunSpec {
            id: "badcfg".into(),
            rootfs: Some(rootfs),
            args: vec!["true".into()],
            flags: vec!["--runtime-config-path".into(), bad.display().to_string()],
            ..RunSpec::new(RUND_RUNTIME)
        })
        .unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("pol"), "{}", out.stderr);
    ctd.remove_container("badcfg");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Every v1 hierarchy's mount point, by name (rund's leader, blkio here, first).
fn v1_mounts() -> Vec<PathBuf> {
    let mut m: Vec<PathBuf> = rund_tests::leaks::cgroup_mounts()
        .into_iter()
        .filter(|m| m.join("cgroup.procs").exists() && !m.join("cgroup.controllers").exists())
        .collect();
    m.sort();
    m
}

/// Visible (non-dot) child cgroups of `rel` in `mount`, and rund's hidden ones.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kubernetes through CRI: the test makes the pod's cgroup as the kubelet does;
/// an init container's cgroup serves the app container, and a restart reuses
/// it again; every container sits at its exact cgroupsPath; after the pod is
/// removed nothing rund made is left in the pod's cgroup (the kubelet's rmdir
/// succeeds) and there is no pool state for it.
#[test]
fn kubelet_shaped_pod_reuses_inside_the_pod_and_leaves_nothing() {
    use rund_tests::cri::api::ContainerState;
    use rund_tests::{ContainerSpec, PodSpec, BUSYBOX_IMAGE};
    let test = "kubelet_shaped_pod_reuses_inside_the_pod_and_leaves_nothing";
    if !v1_memory_present() {
        rund_tests::skip!("{test}: needs cgroup v1 (the pool renames cgroups; v2 has no pool)");
    }
    let Some(_bins) = rund_bins_or_skip(test) else {
        return;
    };
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("rund.toml");
    let state = cfg_dir.path().join("pool-state");
    std::fs::write(
        &cfg,
        format!("[cgroup]\npool = \"on\"\nstate_dir = {state:?}\n"),
    )
    .unwrap();
    let opts = ContainerdOpts {
        rund_config_path: Some(cfg.clone()),
        ..ContainerdOpts::new().cri()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(test, opts) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let mounts = v1_mounts();
    // What the kubelet's cgroupfs driver makes before RunPodSandbox.
    let pod_rel = format!("{}/podkubelet", ctd.cgroup_parent.trim_start_matches('/'));
    for m in &mounts {
        let mut cur = m.clone();
        for c in Path::new(&pod_rel).components() {
            cur.push(c);
            if !cur.exists() {
                std::fs::create_dir(&cur).unwrap();
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    if let Ok(v) = std::fs::read_to_string(cur.parent().unwrap().join(f)) {
                        std::fs::write(cur.join(f), v.trim()).unwrap();
                    }
                }
            }
        }
    }
    let pod = PodSpec::new("kubelet", &format!("/{pod_rel}"));
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let leader = &mounts[0];
    let memory = mounts.iter().find(|m| m.ends_with("memory")).unwrap();
    let exited = |id: &str| {
        cri.container_status(id)
            .is_ok_and(|s| s.state == ContainerState::ContainerExited as i32)
    };
    // The init container runs and exits; CRI deletes its task, and rund
    // keeps its cgroup for the pod's next container.
    let init = ContainerSpec::new("init", BUSYBOX_IMAGE, &["sh", "-c", "exit 0"]);
    let init_id = cri.create_and_start(&pod_id, &init, &pod).expect("init");
    wait_for("init exited", || exited(&init_id));
    wait_for("init's cgroup kept", || {
        children(leader, &pod_rel)
            .1
            .iter()
            .any(|n| n.ends_with(&init_id))
    });
    use std::os::unix::fs::MetadataExt;
    let ino = |id: &str| {
        std::fs::metadata(memory.join(&pod_rel).join(id))
            .unwrap()
            .ino()
    };
    // The init container's directory, renamed from container to container.
    let kept_ino = ino(&init_id);
    let mut app_id = String::new();
    for round in 0..2 {
        let app = ContainerSpec::new("app", BUSYBOX_IMAGE, &["sleep", "1000"]);
        app_id = cri.create_and_start(&pod_id, &app, &pod).expect("app");
        // Renamed, not made: the same directory as the exited container's.
        assert_eq!(
            ino(&app_id),
            kept_ino,
            "round {round}: the app did not reuse the cgroup"
        );
        // The app took the kept cgroup: no hidden dir left, and in every
        // hierarchy exactly the sandbox and the app, at their exact names.
        for m in &mounts {
            let (mut visible, hidden) = children(m, &pod_rel);
            visible.sort();
            let mut want = vec![pod_id.clone(), app_id.clone()];
            want.sort();
            assert_eq!(
                (visible, hidden),
                (want, vec![]),
                "round {round} in {}",
                m.display()
            );
        }
        let procs =
            std::fs::read_to_string(memory.join(&pod_rel).join(&app_id).join("cgroup.procs"))
                .unwrap();
        assert!(
            !procs.trim().is_empty(),
            "the app's processes are at its exact path"
        );
        // A restart (CrashLoopBackOff): stop, remove, create again.
        cri.stop_container(&app_id, 1).expect("StopContainer");
        wait_for("app's cgroup kept", || {
            children(leader, &pod_rel)
                .1
                .iter()
                .any(|n| n.ends_with(&app_id))
        });
        if round == 0 {
            cri.remove_container(&app_id).expect("RemoveContainer");
        }
    }
    for id in [&init_id, &app_id] {
        cri.remove_container(id).expect("RemoveContainer");
    }
    cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&pod_id).expect("RemovePodSandbox");
    // What the kubelet does next: rmdir the pod's cgroup, which must be empty.
    for m in &mounts {
        wait_for("the pod's cgroup empty", || {
            children(m, &pod_rel) == (vec![], vec![])
        });
        std::fs::remove_dir(m.join(&pod_rel))
            .unwrap_or_else(|e| panic!("kubelet rmdir in {}: {e}", m.display()));
    }
    let states = rund_tests::shim::residue::pool_states(&state);
    assert_eq!(
        states,
        Vec::<String>::new(),
        "pool state was made for a pod's cgroup"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}
