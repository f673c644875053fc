//! Real cgroup v1: apply, update, freeze, stats, OOM, bad input, and a
//! process born in its cgroup.
//! Needs root on a v1 host; otherwise each test prints why and returns.

mod common;

use common::{read, Gated, TestTree};
use oci_spec::runtime::*;
use rund_cgroup::{Error, FreezerState, Switch};
use std::path::Path;

fn res_json(j: &str) -> LinuxResources {
    serde_json::from_str(j).expect("resources json")
}

#[test]
fn apply_reads_back_every_controller() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let r = res_json(
        r#"{
        "memory": {"limit": 67108864, "reservation": 33554432, "swap": 134217728, "swappiness": 10},
        "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0", "mems": "0"},
        "pids": {"limit": 50},
        "blockIO": {"weight": 300, "throttleReadBpsDevice": [{"major": 254, "minor": 0, "rate": 1048576}]},
        "devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]
    }"#,
    );
    let m = cg.create("/default/c1", Some(&r)).expect("create");
    let d = |c: &str| m.dirs().v1(c).unwrap().to_path_buf();
    assert_eq!(read(&d("memory").join("memory.limit_in_bytes")), "67108864");
    assert_eq!(
        read(&d("memory").join("memory.soft_limit_in_bytes")),
        "33554432"
    );
    assert_eq!(
        read(&d("memory").join("memory.memsw.limit_in_bytes")),
        "134217728"
    );
    assert_eq!(read(&d("memory").join("memory.swappiness")), "10");
    assert_eq!(read(&d("cpu").join("cpu.shares")), "512");
    assert_eq!(read(&d("cpu").join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&d("cpuset").join("cpuset.cpus")), "0");
    assert_eq!(read(&d("pids").join("pids.max")), "50");
    let blk = d("blkio");
    let weight = if blk.join("blkio.weight").exists() {
        "blkio.weight"
    } else {
        "blkio.bfq.weight"
    };
    if blk.join(weight).exists() {
        assert!(read(&blk.join(weight)).contains("300"));
    }
    assert_eq!(
        read(&blk.join("blkio.throttle.read_bps_device")),
        "254:0 1048576"
    );
    let list = read(&d("devices").join("devices.list"));
    assert!(list.contains("c 10:229 rw"), "{list}");
    assert!(
        list.contains("c 1:3 rwm"),
        "default devices missing: {list}"
    );
    assert!(!list.contains("a *:* rwm"), "still allow-all: {list}");
    // Every hierarchy, cpuacct and name=systemd included, has the cgroup.
    for p in m.paths() {
        assert!(p.is_dir(), "{}", p.display());
    }
    m.destroy().unwrap();
    for p in m.paths() {
        assert!(!p.exists(), "left behind: {}", p.display());
    }
}

#[test]
fn update_live_and_reject_bad_values() {
    let Some(t) = TestTree::v1() else { return };
    let mut cfg = t.config();
    cfg.pool = Switch::Off;
    let cg = t.cgroups(cfg);
    let m = cg.create("/default/u1", None).unwrap();
    let mut child = Gated::spawn("x=$(head -c 20000000 /dev/zero | tr '\\0' a); sleep 1000");
    m.add_pid(child.pid()).unwrap();
    child.release();
    m.update(&res_json(r#"{"memory": {"limit": 268435456}, "cpu": {"shares": 256, "quota": 20000}, "pids": {"limit": 7}}"#))
        .unwrap();
    let d = |c: &str| m.dirs().v1(c).unwrap().to_path_buf();
    assert_eq!(
        read(&d("memory").join("memory.limit_in_bytes")),
        "268435456"
    );
    assert_eq!(read(&d("cpu").join("cpu.shares")), "256");
    assert_eq!(read(&d("cpu").join("cpu.cfs_quota_us")), "20000");
    assert_eq!(read(&d("pids").join("pids.max")), "7");
    // Invalid before the kernel: typed, nothing changed.
    let e = m
        .update(&res_json(r#"{"cpu": {"shares": 1}}"#))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidResource {
                field: "cpu.shares",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(read(&d("cpu").join("cpu.shares")), "256");
    // Wait until the child holds its 20 MB, then ask for less than that
    // with no swap room: the kernel refuses, and we say which file.
    for _ in 0..500 {
        if m.stats().unwrap().memory.usage > 15_000_000 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let e = m
        .update(&res_json(
            r#"{"memory": {"limit": 4194304, "swap": 4194304}}"#,
        ))
        .unwrap_err();
    match &e {
        Error::Write { path, .. } => assert!(path.to_string_lossy().contains("memory."), "{e}"),
        other => panic!("expected a kernel write error, got {other}"),
    }
    m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    let _ = child.child.wait();
    m.destroy().unwrap();
}

#[test]
fn freeze_thaw_and_kill_all_a_real_child() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let m = cg.create("/default/f1", None).unwrap();
    let mut child = Gated::spawn("sleep 1000");
    m.add_pid(child.pid()).unwrap();
    child.release();
    assert!(m.pids().unwrap().contains(&child.pid()));
    m.freeze().unwrap();
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Frozen);
    m.thaw().unwrap();
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Thawed);
    assert!(m.kill_all(nix::sys::signal::SIGKILL).unwrap() >= 1);
    let st = child.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(9));
    m.destroy().unwrap();
}

#[test]
fn stats_of_a_real_process() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let m = cg
        .create(
            "/default/s1",
            Some(&res_json(
                r#"{"memory": {"limit": 104857600}, "pids": {"limit": 20}}"#,
            )),
        )
        .unwrap();
    let mut child = Gated::spawn(
        "x=$(head -c 4000000 /dev/zero | tr '\\0' a); i=0; while :; do i=$((i+1)); done",
    );
    m.add_pid(child.pid()).unwrap();
    child.release();
    let mut s = m.stats().unwrap();
    for _ in 0..1000 {
        s = m.stats().unwrap();
        if s.cpu.usage_total > 0 && s.memory.usage > 1_000_000 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!s.v2);
    assert!(s.cpu.usage_total > 0, "{s:?}");
    assert!(!s.cpu.per_cpu.is_empty());
    assert!(s.memory.usage > 1_000_000, "{s:?}");
    assert_eq!(s.memory.limit, 104857600);
    assert!(s.memory.max_usage >= s.memory.usage);
    assert!(s.pids.current >= 1);
    assert_eq!(s.pids.limit, 20);
    m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    let _ = child.child.wait();
    m.destroy().unwrap();
}

#[test]
fn oom_event_through_eventfd() {
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let r = res_json(r#"{"memory": {"limit": 16777216, "swap": 16777216}}"#);
    let m = cg.create("/default/o1", Some(&r)).unwrap();
    let mem = m.dirs().v1("memory").unwrap().to_path_buf();
    if !mem.join("memory.oom_control").exists() {
        rund_skip::skip!("no memory.oom_control");
    }
    let w = m.oom_watcher().unwrap();
    assert_eq!(w.read_events().unwrap(), 0, "no OOM yet");
    let mut child = Gated::spawn("x=$(head -c 200000000 /dev/zero | tr '\\0' a)");
    m.add_pid(child.pid()).unwrap();
    child.release();
    // Deadline only to fail instead of hanging if no OOM ever comes.
    use std::os::fd::AsFd;
    let mut fds = [nix::poll::PollFd::new(
        w.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let n = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(60_000u16)).unwrap();
    assert_eq!(n, 1, "no OOM event within the deadline");
    assert!(w.read_events().unwrap() >= 1);
    // The kernel kills the hog; the shell then ends by itself.
    let _ = child.child.wait();
    assert!(m.stats().unwrap().oom_kills >= 1);
    m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    m.destroy().unwrap();
    // Removal wakes the watcher too, and is reported as such.
    match w.read_events() {
        Err(Error::CgroupGone) | Ok(0) => {}
        other => panic!("unexpected after removal: {other:?}"),
    }
}

#[test]
fn bad_input_leaves_nothing_behind() {
    let Some(t) = TestTree::v1() else { return };
    for pool in [Switch::On, Switch::Off] {
        let mut cfg = t.config();
        cfg.pool = pool;
        let cg = t.cgroups(cfg);
        if pool == Switch::On {
            cg.pool().warm(Path::new("default"), 2).unwrap();
        }
        assert!(cg.create("/default/../x", None).is_err());
        assert!(cg.create("/default/.rund-pool-1", None).is_err());
        // Rejected by validation, before any directory exists.
        let e = cg
            .create(
                "/default/b1",
                Some(&res_json(r#"{"memory": {"limit": -7}}"#)),
            )
            .unwrap_err();
        assert!(matches!(e, Error::InvalidResource { .. }), "{e}");
        // Rejected by the kernel (no realtime budget in the parent): the
        // claimed or made cgroup goes away again.
        let e = cg
            .create(
                "/default/b2",
                Some(&res_json(
                    r#"{"cpu": {"realtimeRuntime": 5000, "realtimePeriod": 10000}}"#,
                )),
            )
            .unwrap_err();
        assert!(matches!(e, Error::Write { .. }), "{e}");
        for r in &t.roots {
            for n in ["b1", "b2", "x"] {
                assert!(
                    !r.join("default").join(n).exists(),
                    "{n} left in {}",
                    r.display()
                );
            }
        }
        assert!(matches!(cg.load("/default/b2"), Err(Error::NotFound(_))));
    }
}

/// A thread that writes "0" to the `tasks` fds moves only itself, and a
/// child it forks is born in every hierarchy of the cgroup: placement then
/// writes nothing. The test process itself stays where it was.
#[test]
fn a_child_forked_by_a_thread_that_moved_itself_is_born_in_place() {
    use std::io::Write;
    let Some(t) = TestTree::v1() else { return };
    let cg = t.cgroups(t.config());
    let m = cg.create("/default/born", None).expect("create");
    let before = read(Path::new("/proc/self/cgroup"));
    let fds = m.tasks_fds().expect("tasks fds");
    assert_eq!(fds.len(), m.paths().len(), "one per hierarchy");
    let child = std::thread::spawn(move || {
        for fd in fds {
            std::fs::File::from(fd)
                .write_all(b"0")
                .expect("move this thread");
        }
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    })
    .join()
    .unwrap();
    let mut child = Guard(child);
    let pid = child.0.id() as i32;
    let writes = cg.fs_counts().write;
    m.add_pid(pid).unwrap();
    let now = read(Path::new(&format!("/proc/{pid}/cgroup")));
    assert_eq!(
        cg.fs_counts().write,
        writes,
        "placement wrote again: {now} {:?}",
        m.paths()
    );
    for d in m.paths() {
        let procs = read(&d.join("cgroup.procs"));
        assert!(
            procs.lines().any(|l| l == pid.to_string()),
            "{}: {procs}",
            d.display()
        );
    }
    assert_eq!(
        read(Path::new("/proc/self/cgroup")),
        before,
        "the test moved"
    );
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    m.destroy().unwrap();
}

/// Kills the child if the test panics before it does.
struct Guard(std::process::Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
