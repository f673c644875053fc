//! The lease allocator against the real /proc, across threads and across
//! processes (this test binary re-executes itself as a worker).

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use rund_shim::config::UsernsConfig;
use rund_shim::userns::{Lease, LeaseStore, UsernsError};

const WORKER_ENV: &str = "RUND_USERNS_LEASE_WORKER";

fn cfg(base: u32, count: u32) -> UsernsConfig {
    UsernsConfig {
        base,
        size: 1000,
        count,
        ..Default::default()
    }
}

fn me() -> i32 {
    std::process::id() as i32
}

fn assert_disjoint(leases: &[Lease]) {
    let mut slots = HashSet::new();
    for (i, a) in leases.iter().enumerate() {
        assert!(slots.insert(a.index), "index {} handed out twice", a.index);
        for b in &leases[..i] {
            let disjoint =
                a.host_base + a.size <= b.host_base || b.host_base + b.size <= a.host_base;
            assert!(disjoint, "{a:?} overlaps {b:?}");
        }
    }
}

/// Entry point when re-executed: `<op> <dir> <sandbox id> <owner pid>`.
#[test]
fn worker_entry() {
    let Ok(job) = std::env::var(WORKER_ENV) else {
        return;
    };
    let f: Vec<&str> = job.split(' ').collect();
    let store = LeaseStore::new(f[1], &cfg(200_000, 64)).unwrap();
    match f[0] {
        "alloc" => {
            let l = store.allocate(f[2], f[3].parse().unwrap()).unwrap();
            println!("LEASE {} {} {}", l.index, l.host_base, l.size);
        }
        "release" => {
            assert!(store.release(f[2]).unwrap().is_some());
            println!("RELEASED");
        }
        op => panic!("unknown worker op {op}"),
    }
}

fn run_workers(op: &str, dir: &Path, n: usize) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "worker_entry", "--nocapture", "--test-threads=1"])
                .env(
                    WORKER_ENV,
                    format!("{op} {} proc-{i} {}", dir.display(), me()),
                )
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "worker failed: {out:?}");
            let text = String::from_utf8(out.stdout).unwrap();
            // libtest may print "test worker_entry ... " on the same line.
            let line = text
                .lines()
                .find(|l| l.contains("LEASE ") || l.contains("RELEASED"));
            let line = line.unwrap_or_else(|| panic!("no result from worker: {text}"));
            line[line.find("LEASE ").or(line.find("RELEASED")).unwrap()..].to_string()
        })
        .collect()
}

#[test]
fn fifty_processes_get_disjoint_ranges_and_release_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run_workers("alloc", dir.path(), 50);
    let leases: Vec<Lease> = lines
        .iter()
        .map(|l| {
            let n: Vec<u32> = l.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
            Lease {
                index: n[0],
                host_base: n[1],
                size: n[2],
            }
        })
        .collect();
    assert_disjoint(&leases);
    let store = LeaseStore::new(dir.path(), &cfg(200_000, 64)).unwrap();
    assert_eq!(store.list().unwrap().len(), 50);
    // Lowest-free allocation: exactly slots 0..50 in some order.
    assert_eq!(leases.iter().map(|l| l.index).max(), Some(49));
    run_workers("release", dir.path(), 50);
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn fifty_threads_get_disjoint_ranges_and_release_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let alloc: Vec<_> = (0..50)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = LeaseStore::new(&path, &cfg(300_000, 50)).unwrap();
                store.allocate(&format!("t{i}"), me()).unwrap()
            })
        })
        .collect();
    let leases: Vec<Lease> = alloc.into_iter().map(|h| h.join().unwrap()).collect();
    assert_disjoint(&leases);
    let store = LeaseStore::new(&path, &cfg(300_000, 50)).unwrap();
    // The pool is now full.
    assert!(store.allocate("one-more", me()).unwrap_err().is_exhausted());
    // Same id, same lease.
    assert_eq!(store.allocate("t7", me()).unwrap(), leases[7]);
    let release: Vec<_> = (0..50)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = LeaseStore::new(&path, &cfg(300_000, 50)).unwrap();
                store.release(&format!("t{i}")).unwrap()
            })
        })
        .collect();
    for (i, h) in release.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), Some(leases[i]));
    }
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn a_dead_owners_lease_is_reclaimed_a_live_ones_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = LeaseStore::new(dir.path(), &cfg(400_000, 1)).unwrap();
    let mut owner = Command::new("sleep").arg("1000").spawn().unwrap();
    let first = store.allocate("first", owner.id() as i32).unwrap();
    let e = store.allocate("second", me()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "user namespace id pool exhausted: 1 of 1 ranges in use (base 400000, size 1000); \
         raise [userns] count or free sandboxes"
    );
    owner.kill().unwrap();
    owner.wait().unwrap();
    let second = store.allocate("second", me()).unwrap();
    assert_eq!(second, first, "the only range, reclaimed");
    let ids: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|e| e.sandbox_id)
        .collect();
    assert_eq!(ids, ["second"]);
}

#[test]
fn corrupt_file_is_an_error_and_repair_recovers_live_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    // A pool far from anything else on the node.
    let c = UsernsConfig {
        base: 3_000_000_000,
        size: 1000,
        count: 4,
        ..Default::default()
    };
    let store = LeaseStore::new(dir.path(), &c).unwrap();
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(store.path(), b"{\"version\":1,\"leases\":[").unwrap();
    let e = store.allocate("a", me()).unwrap_err();
    assert!(matches!(e, UsernsError::Corrupt { .. }));
    assert!(
        e.to_string().contains(&store.path().display().to_string()),
        "{e}"
    );

    // A live "sandbox" in its own user namespace using slot 2.
    let mut cmd = Command::new("sleep");
    cmd.arg("1000");
    // SAFETY: unshare is async-signal-safe; the child is single-threaded.
    unsafe {
        cmd.pre_exec(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).map_err(Into::into)
        });
    }
    let mut sandbox = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => rund_skip::skip!("repair part: cannot create a user namespace: {e}"),
    };
    let pid = sandbox.id();
    std::fs::write(format!("/proc/{pid}/uid_map"), "0 3000002000 1000\n").unwrap();
    std::fs::write(format!("/proc/{pid}/gid_map"), "0 3000002000 1000\n").unwrap();

    let report = store.repair().unwrap();
    let aside = report.moved_aside.expect("moved aside");
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        b"{\"version\":1,\"leases\":["
    );
    assert_eq!(report.recovered.len(), 1, "{:?}", report.recovered);
    let r = &report.recovered[0];
    assert_eq!(
        (r.lease.host_base, r.lease.size, r.lease.index, r.owner.pid),
        (3_000_002_000, 1000, 2, pid as i32)
    );
    // New allocations avoid the recovered range.
    let got: Vec<u32> = (0..3)
        .map(|i| store.allocate(&format!("n{i}"), me()).unwrap().index)
        .collect();
    assert_eq!(got, [0, 1, 3]);
    sandbox.kill().unwrap();
    sandbox.wait().unwrap();
    // Its owner gone, the recovered lease is reclaimed like any other.
    assert_eq!(store.reclaim().unwrap().len(), 1);
}

#[test]
fn bad_pool_config_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let e = LeaseStore::in_state_dir(
        &state,
        &UsernsConfig {
            base: 0,
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("host root"), "{e}");
    assert!(!state.exists());
    let store = LeaseStore::in_state_dir(&state, &UsernsConfig::default()).unwrap();
    assert_eq!(store.path(), state.join("userns/leases.json"));
}
