//! A recycle in two halves on real cgroup v1 hierarchies: the container's
//! path is free as soon as `destroy_detached` returns, the slot is
//! claimable only once the recycle finishes, and nothing is lost between.

mod common;

use common::{assert_slots_consistent, containers_left, read, TestTree};
use rund_cgroup::{CgroupManager, Cgroups, Destroyed, PendingRecycle, Released};
use std::path::Path;

fn limited() -> oci_spec::runtime::LinuxResources {
    serde_json::from_str(r#"{"pids": {"limit": 3}, "memory": {"limit": 33554432}}"#).unwrap()
}

/// One warm slot in `/default`, claimed by container `a` with limits.
fn claimed(t: &TestTree) -> (Cgroups, CgroupManager) {
    let cg = t.cgroups(t.config());
    cg.pool().warm(Path::new("default"), 1).unwrap();
    let a = cg.create("/default/a", Some(&limited())).unwrap();
    assert!(a.pooled());
    (cg, a)
}

fn pending(d: Destroyed) -> PendingRecycle {
    match d {
        Destroyed::Recycling(p) => p,
        Destroyed::Done(r) => panic!("recycled at once: {r:?}"),
    }
}

#[test]
fn the_path_is_free_at_once_and_the_slot_is_claimable_only_once_finished() {
    let Some(t) = TestTree::v1() else { return };
    let (cg, a) = claimed(&t);
    assert_eq!(assert_slots_consistent(&t, "default"), 0);

    let p = pending(a.destroy_detached().unwrap());
    assert!(
        containers_left(&t, "default").is_empty(),
        "the path is still taken"
    );
    // Neither published nor claimable: a claim now finds no slot and makes one.
    assert_eq!(cg.pool().free_slots(Path::new("default")).unwrap().len(), 0);
    let again = cg.create("/default/a", None).unwrap();
    assert!(!again.pooled(), "claimed a slot still being recycled");
    // gc leaves the half-recycled slot of this live process alone.
    cg.pool_gc(false).unwrap();

    assert_eq!(p.finish().unwrap(), Released::Recycled);
    assert_eq!(assert_slots_consistent(&t, "default"), 1);
    let st = cg.pool_status().unwrap();
    assert_eq!(st[0].counters.recycles, 1, "{:?}", st[0].counters);
    // The next tenant gets the slot with its limits reset.
    let b = cg.create("/default/b", None).unwrap();
    assert!(b.pooled(), "b should get a's recycled slot");
    let pids = read(&b.dirs().v1("pids").unwrap().join("pids.max"));
    assert_eq!(pids.trim(), "max", "a's pids limit stayed");
    b.destroy().unwrap();
    again.destroy().unwrap();
}

#[test]
fn a_dropped_recycle_still_finishes() {
    let Some(t) = TestTree::v1() else { return };
    let (cg, a) = claimed(&t);
    drop(pending(a.destroy_detached().unwrap()));
    assert_eq!(assert_slots_consistent(&t, "default"), 1);
    assert_eq!(cg.pool_status().unwrap()[0].counters.recycles, 1);
}

#[test]
fn outside_shared_slots_destroy_detached_is_done_at_once() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    // Not a pool parent: removed (or kept) at once, nothing left pending.
    let m = cg.create("/elsewhere/x", None).unwrap();
    assert!(matches!(
        m.destroy_detached().unwrap(),
        Destroyed::Done(Some(_))
    ));
    assert!(containers_left(&t, "elsewhere").is_empty());
}
