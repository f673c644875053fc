use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::*;

/// Processes by pid -> start time; removing one "kills" it.
#[derive(Default)]
struct Fake(Mutex<HashMap<i32, u64>>);

impl Fake {
    fn spawn(&self, pid: i32, start: u64) {
        self.0.lock().unwrap().insert(pid, start);
    }
    fn kill(&self, pid: i32) {
        self.0.lock().unwrap().remove(&pid);
    }
}

impl Liveness for Fake {
    fn start_time(&self, pid: i32) -> Option<u64> {
        self.0.lock().unwrap().get(&pid).copied()
    }
    fn boot_id(&self) -> String {
        "boot-1".into()
    }
}

fn store(dir: &Path, count: u32) -> (LeaseStore, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let cfg = UsernsConfig {
        base: 100_000,
        size: 1000,
        count,
        ..Default::default()
    };
    let s = LeaseStore::new(dir, &cfg)
        .unwrap()
        .with_liveness(fake.clone());
    (s, fake)
}

#[test]
fn lowest_free_range_and_idempotent_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 4);
    fake.spawn(10, 1);
    let a = s.allocate("a", 10).unwrap();
    let b = s.allocate("b", 10).unwrap();
    assert_eq!((a.index, a.host_base, a.size), (0, 100_000, 1000));
    assert_eq!((b.index, b.host_base), (1, 101_000));
    assert_eq!(s.allocate("a", 10).unwrap(), a);
    assert_eq!(s.release("a").unwrap(), Some(a));
    assert_eq!(s.release("a").unwrap(), None);
    // The freed lowest slot is reused.
    assert_eq!(s.allocate("c", 10).unwrap().index, 0);
}

#[test]
fn dead_owner_is_reclaimed_and_same_id_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 2);
    fake.spawn(10, 1);
    fake.spawn(11, 1);
    let a = s.allocate("a", 10).unwrap();
    s.allocate("b", 11).unwrap();
    // Shim of "a" restarts as pid 12: same range, new owner.
    fake.kill(10);
    fake.spawn(12, 5);
    assert_eq!(s.allocate("a", 12).unwrap(), a);
    assert_eq!(
        s.list()
            .unwrap()
            .iter()
            .find(|e| e.sandbox_id == "a")
            .unwrap()
            .owner
            .pid,
        12
    );
    // Pool full; "b"'s owner dies and its pid is reused: reclaimed.
    fake.kill(11);
    fake.spawn(11, 99);
    let c = s.allocate("c", 12).unwrap();
    assert_eq!(c.index, 1);
    let ids: Vec<_> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|e| e.sandbox_id)
        .collect();
    assert_eq!(ids, ["a", "c"]);
}

#[test]
fn adopt_moves_ownership() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 1);
    fake.spawn(10, 1);
    fake.spawn(20, 2);
    s.allocate("a", 10).unwrap();
    s.adopt("a", 20).unwrap();
    fake.kill(10);
    assert!(s.reclaim().unwrap().is_empty());
    fake.kill(20);
    assert_eq!(s.reclaim().unwrap().len(), 1);
    assert!(s.adopt("zzz", 10).is_err());
}

#[test]
fn exhaustion_names_the_pool_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 2);
    fake.spawn(10, 1);
    s.allocate("a", 10).unwrap();
    s.allocate("b", 10).unwrap();
    let e = s.allocate("c", 10).unwrap_err();
    assert!(e.is_exhausted());
    assert_eq!(
        e.to_string(),
        "user namespace id pool exhausted: 2 of 2 ranges in use (base 100000, size 1000); \
         raise [userns] count or free sandboxes"
    );
    assert!(s.get("c").unwrap().is_none());
}

#[test]
fn owner_must_be_running() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _fake) = store(dir.path(), 2);
    assert!(matches!(
        s.allocate("a", 77),
        Err(UsernsError::OwnerGone(77))
    ));
    assert!(
        !s.path().exists(),
        "nothing written for a refused allocation"
    );
}

#[test]
fn leases_from_an_older_pool_config_are_respected() {
    let dir = tempfile::tempdir().unwrap();
    let (old, fake) = store(dir.path(), 4);
    fake.spawn(10, 1);
    old.allocate("a", 10).unwrap(); // 100000..101000
    let cfg = UsernsConfig {
        base: 100_500,
        size: 1000,
        count: 3,
        ..Default::default()
    };
    let new = LeaseStore::new(dir.path(), &cfg)
        .unwrap()
        .with_liveness(fake.clone());
    // Slot 0 (100500..101500) overlaps "a": skip to slot 1.
    assert_eq!(new.allocate("b", 10).unwrap().host_base, 101_500);
}

#[test]
fn corrupt_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 2);
    fake.spawn(10, 1);
    for text in ["{not json", "", r#"{"version":9,"leases":[]}"#] {
        std::fs::write(s.path(), text).unwrap();
        let e = s.allocate("a", 10).unwrap_err();
        assert!(
            e.to_string().contains(&s.path().display().to_string()),
            "{e}"
        );
        assert!(matches!(e, UsernsError::Corrupt { .. }), "{e}");
        assert_eq!(
            std::fs::read_to_string(s.path()).unwrap(),
            text,
            "left untouched"
        );
    }
    let entry = |id: &str, base: u32| {
        format!(
            r#"{{"sandbox_id":"{id}","host_base":{base},"size":1000,"index":0,"owner":{{"pid":10,"start_time":1,"boot_id":"boot-1"}}}}"#
        )
    };
    let overlapping = format!(
        r#"{{"version":1,"leases":[{},{}]}}"#,
        entry("a", 100_000),
        entry("b", 100_500)
    );
    std::fs::write(s.path(), overlapping).unwrap();
    assert!(s.list().unwrap_err().to_string().contains("overlap"));
    let ok = format!(r#"{{"version":1,"leases":[{}]}}"#, entry("a", 100_000));
    std::fs::write(s.path(), ok).unwrap();
    assert_eq!(s.get("a").unwrap().unwrap().host_base, 100_000);
}

#[test]
fn repair_moves_a_corrupt_file_aside_and_keeps_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 2);
    fake.spawn(10, 1);
    s.allocate("a", 10).unwrap();
    let report = s.repair().unwrap();
    assert!(report.moved_aside.is_none());
    assert_eq!(s.list().unwrap().len(), 1);
    std::fs::write(s.path(), "{garbage").unwrap();
    let proc_root = tempfile::tempdir().unwrap();
    let report = repair::repair(dir.path(), s.pool(), fake.as_ref(), proc_root.path()).unwrap();
    let aside = report.moved_aside.unwrap();
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "{garbage");
    assert!(s.list().unwrap().is_empty());
    assert_eq!(s.allocate("b", 10).unwrap().index, 0);
}

#[test]
fn spec_ranges_block_the_pool_and_cannot_take_a_leased_range() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 4);
    fake.spawn(10, 1);
    fake.spawn(11, 1);
    fake.spawn(12, 1);
    // Slot 0 is leased by the pool.
    assert_eq!(s.allocate("pooled", 10).unwrap().index, 0);
    // A spec range over slot 1 (uid) and slot 2 (gid) reserves both.
    let n = s.reserve("spec", 11, &[(101_000, 1000), (102_500, 10)]);
    assert_eq!(n.unwrap(), 2);
    assert_eq!(
        s.allocate("next", 12).unwrap().index,
        3,
        "slots 1 and 2 are reserved"
    );
    // Over a live pool lease: refused, naming both ranges and the holder.
    let e = s.reserve("clash", 12, &[(100_500, 1)]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("100500..100501") && msg.contains("pooled"),
        "{msg}"
    );
    assert!(e.is_bad_input());
    // Two spec-mapped sandboxes may share ids: the spec chose them.
    s.reserve("spec2", 12, &[(101_000, 1000)]).unwrap();
    // Release drops every range of the sandbox at once.
    s.release("spec").unwrap();
    assert!(s.list().unwrap().iter().all(|e| e.sandbox_id != "spec"));
}

#[test]
fn spec_ranges_are_clipped_to_the_pool_and_adopted_together() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 4);
    fake.spawn(12, 1);
    fake.spawn(20, 7);
    // Outside the pool nothing is recorded; straddling its ends is clipped.
    assert_eq!(s.reserve("outside", 12, &[(200_000, 5)]).unwrap(), 0);
    assert_eq!(
        s.reserve("multi", 12, &[(103_990, 20), (99_990, 20)])
            .unwrap(),
        2
    );
    let mine: Vec<(u32, u32)> = s
        .list()
        .unwrap()
        .into_iter()
        .filter(|e| e.sandbox_id == "multi")
        .map(|e| (e.lease.host_base, e.lease.size))
        .collect();
    assert_eq!(mine, vec![(103_990, 10), (100_000, 10)]);
    // Ownership of every range moves with adopt.
    s.adopt("multi", 20).unwrap();
    fake.kill(12);
    assert_eq!(s.reclaim().unwrap(), vec![], "both ranges moved to pid 20");
    assert_eq!(
        s.allocate("p", 20).unwrap().index,
        1,
        "slots 0 and 3 are held"
    );
}

#[test]
fn release_owned_leaves_ids_another_owner_took() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 4);
    fake.spawn(10, 1);
    fake.spawn(20, 1);
    s.allocate("a", 10).unwrap();
    s.allocate("b", 10).unwrap();
    // "a"'s agent took its ids: the shim that leased them ahead keeps its hands off.
    s.adopt("a", 20).unwrap();
    assert_eq!(s.release_owned("a", 10).unwrap(), 0);
    assert!(s.get("a").unwrap().is_some());
    // "b" was never taken: its leaser frees it, once.
    assert_eq!(s.release_owned("b", 10).unwrap(), 1);
    assert_eq!(s.get("b").unwrap(), None);
    assert_eq!(s.release_owned("b", 10).unwrap(), 0);
    // The same pid with another start time is another process.
    s.allocate("c", 10).unwrap();
    fake.kill(10);
    fake.spawn(10, 2);
    assert_eq!(s.release_owned("c", 10).unwrap(), 0);
}

#[test]
fn a_live_sandbox_s_id_is_refused_to_another_owner_never_shared() {
    let dir = tempfile::tempdir().unwrap();
    let (s, fake) = store(dir.path(), 4);
    fake.spawn(10, 1);
    fake.spawn(20, 1);
    fake.spawn(30, 1);
    let a = s.allocate("web", 10).unwrap();
    // Its agent took it; a shim elsewhere (another containerd namespace) asks for "web" too.
    s.adopt("web", 20).unwrap();
    let e = s.allocate("web", 30).unwrap_err();
    assert!(
        matches!(e, UsernsError::IdInUse { pid: 20, .. }) && e.is_bad_input(),
        "{e}"
    );
    assert!(e.to_string().contains("another id"), "{e}");
    // Its owner still gets it, and once the sandbox is gone the next owner does.
    assert_eq!(s.allocate("web", 20).unwrap(), a);
    fake.kill(20);
    assert_eq!(s.allocate("web", 30).unwrap(), a);
}
