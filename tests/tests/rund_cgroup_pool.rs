//! Issue 7 through containerd 1.6 and ctr: containers started at once claim the pre-made slots of
//! the node-wide cgroup pool (no new slot is made while the pool is warm), each container's
//! devices cgroup holds exactly deny-all plus the defaults, `[trace] phases_file` records every
//! Create's cgroup phase, and delete recycles every slot. Bad pool input fails clearly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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
