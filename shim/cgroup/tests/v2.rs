//! cgroup v2: exact paths and no pool, resources converted as runc converts
//! them (fake tree), then a real cgroup2 mount: the BPF device filter, freeze,
//! cgroup.kill and stats. The hybrid host's `/sys/fs/cgroup/unified` has no
//! controllers but takes device filters, freezing and killing; tests that
//! need memory/cpu/pids say so and skip unless the mount delegates them.

mod common;

use common::{read, TestTree};
use oci_spec::runtime::LinuxResources;
use rund_cgroup::fs::FakeFs;
use rund_cgroup::{
    CgroupConfig, CgroupManager, Cgroups, Dirs, Error, FreezerState, Hierarchy, Released,
};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

fn res(json: &str) -> LinuxResources {
    serde_json::from_str(json).unwrap()
}

fn fake_with(controllers: &str) -> (tempfile::TempDir, Cgroups) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cg");
    let fs = FakeFs::v2();
    fs.seed_root(&root).unwrap();
    std::fs::write(root.join("cgroup.controllers"), controllers).unwrap();
    let cfg = CgroupConfig {
        state_dir: tmp.path().join("state"),
        ..CgroupConfig::default()
    };
    (
        tmp,
        Cgroups::with(Hierarchy::v2_at(&root), Arc::new(fs), cfg),
    )
}

fn fake() -> (tempfile::TempDir, Cgroups) {
    fake_with("cpuset cpu io memory hugetlb pids rdma\n")
}

fn v2_dir(m: &CgroupManager) -> std::path::PathBuf {
    let Dirs::V2(d) = m.dirs().clone() else {
        panic!("v2 dirs")
    };
    d
}

#[test]
fn fake_v2_exact_path_no_pool_and_runc_conversions() {
    let (tmp, cg) = fake();
    let root = tmp.path().join("cg");
    let e = cg.pool_warm("/k8s", 3).unwrap_err();
    assert!(e.to_string().contains("refuses rename on cgroup v2"), "{e}");
    let before = cg.fs_counts();
    let r = res(
        r#"{"memory": {"limit": 1048576, "swap": 3145728, "reservation": 4096},
        "cpu": {"shares": 1024, "quota": 20000, "burst": 1000, "idle": 0, "cpus": "0", "mems": "0"},
        "pids": {"limit": 9},
        "blockIO": {"weight": 500, "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1000}]},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}],
        "rdma": {"mlx5_0": {"hcaHandles": 3, "hcaObjects": 100}},
        "unified": {"memory.high": "2097152", "pids.max": "7"}}"#,
    );
    std::fs::write(root.join("hugetlb.2MB.max"), "max").unwrap();
    let m = cg
        .create("kubepods-besteffort-pod1.slice:cri-containerd:c1", Some(&r))
        .unwrap();
    let d = v2_dir(&m);
    // The exact systemd expansion, made by mkdir: no slot, no rename.
    assert_eq!(
        d,
        root.join("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-c1.scope")
    );
    assert!(!m.pooled());
    let c = cg.fs_counts();
    assert_eq!((c.mkdir - before.mkdir, c.rename - before.rename), (4, 0));
    for (f, want) in [
        ("memory.max", "1048576"),
        ("memory.swap.max", "2097152"),
        ("memory.low", "4096"),
        ("memory.high", "2097152"),
        ("cpu.weight", "100"),
        ("cpu.max", "20000 100000"),
        ("cpu.max.burst", "1000"),
        ("cpu.idle", "0"),
        ("cpuset.cpus", "0"),
        ("pids.max", "7"),
        ("io.weight", "4950"),
        ("io.max", "8:0 rbps=1000"),
        ("hugetlb.2MB.max", "4194304"),
        ("rdma.max", "mlx5_0 hca_handle=3 hca_object=100"),
    ] {
        assert_eq!(read(&d.join(f)), want, "{f}");
    }
    assert!(FakeFs::device_filter(&d).is_some(), "no device filter");
    // Only what an update brings changes; period alone resets the quota to
    // max, as runc writes it.
    m.update(&res(r#"{"cpu": {"period": 50000}}"#)).unwrap();
    assert_eq!(read(&d.join("cpu.max")), "max 50000");
    assert_eq!(read(&d.join("memory.max")), "1048576");
    assert_eq!(m.destroy().unwrap(), Some(Released::Removed));
    assert!(!d.exists());
    // Nothing of a pool exists on v2: no state, no slots.
    assert!(!tmp.path().join("state").exists());
    assert!(cg.pool_status().unwrap().is_empty());
}

#[test]
fn fake_v2_missing_controller_and_bad_input_name_it_and_leave_nothing() {
    let (tmp, cg) = fake_with("cpu memory pids\n");
    let root = tmp.path().join("cg");
    for (json, want) in [
        (
            r#"{"rdma": {"mlx5_0": {"hcaHandles": 1}}}"#,
            "controller rdma",
        ),
        (r#"{"blockIO": {"weight": 100}}"#, "controller io"),
        (
            r#"{"hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}"#,
            "controller hugetlb",
        ),
        (r#"{"cpu": {"cpus": "0"}}"#, "controller cpuset"),
        (
            r#"{"unified": {"misc.max": "res_a 1"}}"#,
            "controller \"misc\"",
        ),
        (r#"{"unified": {"cgroup.procs": "1"}}"#, "managed by rund"),
        (
            r#"{"unified": {"memory/../x": "1"}}"#,
            "CONTROLLER.PARAMETER",
        ),
        (r#"{"memory": {"swap": 1000}}"#, "needs a memory limit"),
        (
            r#"{"devices": [{"allow": true, "type": "c", "access": "rwx"}]}"#,
            "devices[0]",
        ),
    ] {
        let e = cg.create("/pod/c1", Some(&res(json))).unwrap_err();
        assert!(e.to_string().contains(want), "{json}: {e}");
        assert!(!root.join("pod/c1").exists(), "{json} left the cgroup");
    }
}

#[test]
fn fake_v2_kill_all_uses_cgroup_kill() {
    let (tmp, cg) = fake();
    let m = cg.create("/pod/k1", None).unwrap();
    let d = v2_dir(&m);
    std::fs::write(d.join("cgroup.kill"), "").unwrap();
    assert_eq!(m.kill_all(nix::sys::signal::SIGKILL).unwrap(), 0);
    assert_eq!(read(&d.join("cgroup.kill")), "1");
    drop(tmp);
}

/// v2 takes any memory.max (and OOM-kills to meet it): only checkBeforeUpdate refuses a limit
/// at or below usage, as runc's CheckMemoryUsage does.
#[test]
fn fake_v2_check_before_update_refuses_a_limit_at_usage() {
    let (tmp, cg) = fake();
    let m = cg.create("/pod/u", None).unwrap();
    let d = v2_dir(&m);
    std::fs::write(d.join("memory.current"), "8192\n").unwrap();
    let e = m
        .update(&res(
            r#"{"memory": {"limit": 8192, "checkBeforeUpdate": true}}"#,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("memory.limit"), "{e}");
    assert_ne!(read(&d.join("memory.max")), "8192");
    let e = m
        .update(&res(
            r#"{"memory": {"limit": -1, "swap": 4096, "checkBeforeUpdate": true}}"#,
        ))
        .unwrap_err();
    assert!(e.to_string().contains("memory.swap"), "{e}");
    m.update(&res(
        r#"{"memory": {"limit": 8193, "checkBeforeUpdate": true}}"#,
    ))
    .unwrap();
    assert_eq!(read(&d.join("memory.max")), "8193");
    m.update(&res(r#"{"memory": {"limit": 4096}}"#)).unwrap();
    assert_eq!(read(&d.join("memory.max")), "4096");
    drop(tmp);
}

#[test]
fn fake_v2_reclaim_before_rmdir_is_a_switch() {
    for on in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cg");
        let fs = FakeFs::v2();
        fs.seed_root(&root).unwrap();
        let cfg = CgroupConfig {
            state_dir: tmp.path().join("state"),
            reclaim_on_remove: on,
            ..CgroupConfig::default()
        };
        let cg = Cgroups::with(Hierarchy::v2_at(&root), Arc::new(fs), cfg);
        let m = cg.create("/pod/r", None).unwrap();
        let d = v2_dir(&m);
        std::fs::write(d.join("memory.current"), "8192\n").unwrap();
        // Watch the reclaim write: keep a hard link to the file past rmdir.
        let seen = tmp.path().join("reclaim-seen");
        std::fs::hard_link(d.join("memory.reclaim"), &seen).unwrap();
        m.destroy().unwrap();
        let want = if on { "8192" } else { "" };
        assert_eq!(read(&seen), want, "reclaim_on_remove = {on}");
    }
}

/// Worker half of the device test: opens `RUND_OPEN_PATH` read-write and
/// prints the errno (0 when it opened).
#[test]
fn open_worker() {
    let Ok(p) = std::env::var("RUND_OPEN_PATH") else {
        return;
    };
    let r = std::fs::OpenOptions::new().read(true).write(true).open(&p);
    println!(
        "OPEN {}",
        r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
    );
}

/// Run the open worker inside `m`'s cgroup; its errno.
fn open_inside(m: &CgroupManager, path: &Path) -> i32 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read _gate; exec \"$0\" --exact open_worker --nocapture --test-threads=1")
        .arg(exe)
        .env("RUND_OPEN_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    m.add_pid(child.id() as i32).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut errno = None;
    for l in out.lines().map_while(Result::ok) {
        if let Some(i) = l.find("OPEN ") {
            errno = l[i + 5..].trim().parse().ok();
        }
    }
    assert!(child.wait().unwrap().success());
    errno.expect("the worker printed no OPEN line")
}

/// A character device node made with mknod, removed on drop.
struct Node(std::path::PathBuf);
impl Node {
    fn mknod(major: u64, minor: u64) -> Node {
        // devtmpfs: a tempdir may be on a nodev mount, where no node opens.
        let p = std::path::PathBuf::from(format!(
            "/dev/.rund-test-{}-{major}-{minor}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        nix::sys::stat::mknod(
            &p,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(major, minor),
        )
        .unwrap_or_else(|e| panic!("mknod {}: {e}", p.display()));
        Node(p)
    }
}
impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn filters_on(dir: &Path) -> usize {
    let f = std::fs::File::open(dir).unwrap();
    rund_cgroup::bpf::query_device(f.as_fd()).unwrap().len()
}

#[test]
fn real_cgroup2_device_filter_denies_then_update_allows() {
    let Some(t) = TestTree::v2() else { return };
    let cg = t.cgroups(t.config());
    let m = cg.create("/devtest/c1", None).unwrap();
    let dir = v2_dir(&m);
    assert_eq!(filters_on(&dir), 1, "create attaches one filter");
    // /dev/fuse's numbers: not in the default list.
    let fuse = Node::mknod(10, 229);
    let null = Node::mknod(1, 3);
    assert_eq!(open_inside(&m, &null.0), 0, "an allowed node must open");
    assert_eq!(
        open_inside(&m, &fuse.0),
        libc::EPERM,
        "a node not in the list"
    );
    m.update(&res(r#"{"devices": [{"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]}"#))
        .unwrap();
    assert_eq!(filters_on(&dir), 1, "the update replaced the filter");
    assert_eq!(open_inside(&m, &fuse.0), 0, "allowed after the update");
    assert_eq!(open_inside(&m, &null.0), 0, "the defaults stay");
    // Outside the cgroup nothing changed.
    assert!(std::fs::File::open(&fuse.0).is_ok());
    assert_eq!(m.destroy().unwrap(), Some(Released::Removed));
    assert!(!dir.exists());
}

#[test]
fn real_cgroup2_exact_path_freeze_kill_and_stats() {
    let Some(t) = TestTree::v2() else { return };
    let cg = t.cgroups(t.config());
    let m = cg.create("/pods/r1", None).unwrap();
    let dir = v2_dir(&m);
    assert_eq!(dir, t.roots[0].join("pods/r1"));
    let mut child = common::Gated::spawn("sleep 1000");
    let before = cg.fs_counts().write;
    m.add_pid(child.pid()).unwrap();
    assert_eq!(cg.fs_counts().write, before + 1, "one cgroup.procs write");
    // Already there (as after clone3 into the cgroup): no second migration.
    m.add_pid(child.pid()).unwrap();
    assert_eq!(cg.fs_counts().write, before + 1, "placed twice");
    child.release();
    assert!(m.pids().unwrap().contains(&child.pid()));
    // The process sits at the exact path, as every reader of the tree expects.
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", child.pid())).unwrap();
    let name = t.roots[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let want = format!("/{name}/pods/r1");
    assert!(
        own.lines()
            .any(|l| l.starts_with("0::") && l.ends_with(&want)),
        "{own}"
    );
    m.freeze().unwrap();
    assert_eq!(m.freezer_state().unwrap(), FreezerState::Frozen);
    m.thaw().unwrap();
    let s = m.stats().unwrap();
    assert!(s.v2 && s.cpu.usage_total > 0, "{s:?}");
    let _fd = m.cgroup_dir_fd().unwrap();
    if dir.join("cgroup.kill").exists() {
        assert!(m.kill_all(nix::sys::signal::SIGKILL).unwrap() >= 1);
    } else {
        eprintln!("note: no cgroup.kill (kernel < 5.14): kill_all froze and signalled");
        m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    }
    let _ = child.child.wait();
    assert_eq!(m.destroy().unwrap(), Some(Released::Removed));
    assert!(!dir.exists());
}

#[test]
fn real_cgroup2_missing_controller_is_named() {
    let Some(t) = TestTree::v2() else { return };
    let have = read(&t.roots[0].join("cgroup.controllers"));
    let Some((ctrl, json)) = [
        ("memory", r#"{"memory": {"limit": 1048576}}"#),
        ("pids", r#"{"pids": {"limit": 5}}"#),
        ("cpu", r#"{"cpu": {"shares": 512}}"#),
        ("io", r#"{"blockIO": {"weight": 100}}"#),
        ("rdma", r#"{"rdma": {"mlx5_0": {"hcaHandles": 1}}}"#),
    ]
    .into_iter()
    .find(|(c, _)| !have.split_whitespace().any(|h| h == *c)) else {
        rund_skip::skip!("every controller is delegated here ({have})");
    };
    let cg = t.cgroups(t.config());
    let e = cg.create("/pods/x", Some(&res(json))).unwrap_err();
    assert!(matches!(e, Error::ControllerMissing(c) if c == ctrl), "{e}");
    assert!(!t.roots[0].join("pods/x").exists());
}

/// Needs memory, cpu and pids delegated (a pure v2 host or the VM suite).
#[test]
fn real_cgroup2_limits_match_the_spec() {
    let Some(t) = TestTree::v2() else { return };
    let have = read(&t.roots[0].join("cgroup.controllers"));
    let missing: Vec<&str> = ["memory", "cpu", "pids"]
        .into_iter()
        .filter(|c| !have.split_whitespace().any(|h| h == *c))
        .collect();
    if !missing.is_empty() {
        rund_skip::skip!(
            "{} not delegated at {} (a pure cgroup v2 mount is needed)",
            missing.join(", "),
            t.roots[0].display()
        );
    }
    let cg = t.cgroups(t.config());
    let m = cg
        .create(
            "/pods/lim",
            Some(&res(r#"{"memory": {"limit": 33554432}, "cpu": {"shares": 1024, "quota": 50000, "period": 100000}, "pids": {"limit": 12}}"#)),
        )
        .unwrap();
    let d = v2_dir(&m);
    assert_eq!(read(&d.join("memory.max")), "33554432");
    assert_eq!(read(&d.join("cpu.weight")), "100");
    assert_eq!(read(&d.join("cpu.max")), "50000 100000");
    assert_eq!(read(&d.join("pids.max")), "12");
    // The kernel's own refusal comes back naming the file.
    let e = m.update(&res(r#"{"cpu": {"quota": 1000, "period": 1000000}}"#));
    assert!(e.is_ok() || matches!(e, Err(Error::Write { .. })));
    m.destroy().unwrap();
}

/// Needs the memory controller delegated (a pure v2 host or the VM suite).
#[test]
fn real_cgroup2_oom_kill_is_reported_from_memory_events() {
    let Some(t) = TestTree::v2() else { return };
    let have = read(&t.roots[0].join("cgroup.controllers"));
    if !have.split_whitespace().any(|c| c == "memory") {
        rund_skip::skip!("memory not delegated at {}", t.roots[0].display());
    }
    let cg = t.cgroups(t.config());
    let m = cg
        .create(
            "/pods/oom",
            Some(&res(r#"{"memory": {"limit": 16777216, "swap": 16777216}}"#)),
        )
        .unwrap();
    let w = m.oom_watcher().unwrap();
    assert_eq!(w.read_events().unwrap(), 0, "no OOM yet");
    let mut child = common::Gated::spawn("x=$(head -c 200000000 /dev/zero | tr '\\0' a)");
    m.add_pid(child.pid()).unwrap();
    child.release();
    // Deadline only to fail instead of hanging if no OOM ever comes.
    let mut fds = [nix::poll::PollFd::new(
        w.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let mut seen = 0;
    for _ in 0..60 {
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
        seen += w.read_events().unwrap();
        if seen > 0 {
            break;
        }
    }
    assert!(seen >= 1, "no oom_kill in memory.events");
    let _ = child.child.wait();
    let s = m.stats().unwrap();
    assert!(s.oom_kills >= 1 && s.memory_events.oom_kill >= 1, "{s:?}");
    m.kill_all(nix::sys::signal::SIGKILL).unwrap();
    m.destroy().unwrap();
}
