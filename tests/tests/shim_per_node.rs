//! `[shim] mode = "per-node"` through real containerd and ctr: every pod of the namespace is
//! served by one shim process, each on its own socket; a pod's Delete closes only its socket;
//! bad input (a junk control request, a missing rootfs) is refused and leaves the others
//! served; the node's shim leaves once no pod is left, or on SIGTERM, with nothing behind.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use rund_tests::leaks::shim_processes;
use rund_tests::pernode::*;
use rund_tests::{
    assert_no_leaks_within, ContainerSpec, Containerd, ContainerdOpts, LeakSnapshot, PodSpec,
    BUSYBOX_IMAGE,
};

#[test]
fn pods_share_one_shim_and_it_leaves_after_the_last() {
    let Some(ctd) = start("pods_share_one_shim_and_it_leaves_after_the_last") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    // Started at once: each `start` finds the node (or starts it) under the node lock.
    let ids = ["pn1", "pn2", "pn3", "pn4"];
    std::thread::scope(|s| {
        for id in ids {
            let (ctd, rootfs) = (&ctd, &rootfs);
            s.spawn(move || run_detached(ctd, id, rootfs));
        }
    });
    let shims: Vec<u32> = ids
        .iter()
        .map(|id| shim_of(task_pid(&ctd, id)).expect("a shim above the task"))
        .collect();
    assert!(
        shims.iter().all(|&s| s == shims[0]),
        "one shim serves every pod: {shims:?}"
    );
    let node = shims[0];
    // The pods share the node's cgroup set-up: one pool refiller, not one a pod.
    let refillers = std::fs::read_dir(format!("/proc/{node}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "rund-cgroup-ref")
        .count();
    assert!(refillers <= 1, "{refillers} pool refillers in the node");
    let control = control_socket(&ctd);
    assert!(
        control.exists(),
        "{} is the node's socket",
        control.display()
    );

    // A pod that comes and goes while the others run; its output comes back.
    let out = ctd
        .run_spec(&spec(&ctd, "pn-once", &rootfs, &["echo", "from the node"]))
        .unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "from the node\n"),
        "{out:?}"
    );

    // Junk on the control socket is answered and changes nothing.
    let mut s = UnixStream::connect(&control).unwrap();
    s.write_all(b"{\"socket\": 7}\n").unwrap();
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).unwrap();
    assert!(reply.starts_with("bad request"), "{reply:?}");

    // A pod with no rootfs fails clearly and leaves the node serving the others.
    let missing = ctd.dir.join("no-such-rootfs");
    let out = ctd
        .run_spec(&spec(&ctd, "pn-bad", &missing, &["true"]))
        .unwrap();
    assert!(!out.success(), "{out:?}");
    let _ = ctd.ctr(&["container", "rm", "pn-bad"]);

    // One pod's delete closes its socket only.
    remove(&ctd, "pn1");
    for id in ["pn2", "pn3"] {
        assert_eq!(shim_of(task_pid(&ctd, id)), Some(node), "{id}");
    }
    let out = ctd
        .ctr(&[
            "task",
            "exec",
            "--exec-id",
            "e1",
            "pn2",
            "echo",
            "still served",
        ])
        .unwrap();
    assert_eq!(out.stdout, "still served\n", "{out:?}");

    for id in ["pn2", "pn3", "pn4"] {
        remove(&ctd, id);
    }
    assert!(
        gone_within(node, GRACE),
        "the node's shim left with its last pod"
    );
    assert_node_files_gone(&ctd);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn a_pod_after_the_node_left_gets_a_new_node() {
    let Some(ctd) = start("a_pod_after_the_node_left_gets_a_new_node") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "pa", &rootfs);
    let first = shim_of(task_pid(&ctd, "pa")).unwrap();
    remove(&ctd, "pa");
    assert!(gone_within(first, GRACE), "the first node left");
    run_detached(&ctd, "pb", &rootfs);
    let second = shim_of(task_pid(&ctd, "pb")).unwrap();
    assert_ne!(first, second);
    remove(&ctd, "pb");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// SIGTERM to the node's keeper and shim (as a node's shutdown sends every process left in
/// containerd's unit): every pod is torn down and containerd hears of it, and the node leaves
/// nothing: no process, no pod socket, no control socket, no lock file.
#[test]
fn sigterm_tears_every_pod_down_and_leaves_nothing() {
    let Some(ctd) = start("sigterm_tears_every_pod_down_and_leaves_nothing") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let ids = ["pt1", "pt2"];
    for id in ids {
        run_detached(&ctd, id, &rootfs);
    }
    let tasks: Vec<u32> = ids.iter().map(|id| task_pid(&ctd, id)).collect();
    let node = shim_of(tasks[0]).expect("a shim above the task");
    let keeper = ppid_and_comm(node).expect("the node's parent").0;
    assert!(rund_tests::leaks::is_keeper(keeper), "{}", describe(keeper));
    let control = control_socket(&ctd);
    let lock = PathBuf::from(format!("{}.lock", control.display()));
    let sockets: Vec<PathBuf> = ids.iter().map(|id| pod_socket(&ctd, id)).collect();
    for s in sockets.iter().chain([&control, &lock]) {
        assert!(s.exists(), "{} is there while the node serves", s.display());
    }

    signal(keeper, nix::sys::signal::Signal::SIGTERM);
    signal(node, nix::sys::signal::Signal::SIGTERM);
    for pid in tasks.iter().chain([&node, &keeper]) {
        assert!(gone_within(*pid, GRACE), "{}", describe(*pid));
    }
    for s in sockets.iter().chain([&control, &lock]) {
        assert!(!s.exists(), "{} is left behind", s.display());
    }
    // containerd heard of it: no task runs (a dead shim's tasks may be gone from the list).
    let out = ctd.ctr(&["task", "ls"]).unwrap();
    for id in ids {
        assert!(
            !out.stdout
                .lines()
                .any(|l| l.starts_with(id) && l.contains("RUNNING")),
            "{id} still runs: {}",
            out.stdout
        );
        let _ = ctd.ctr(&["task", "rm", id]);
        let rm = ctd.ctr(&["container", "rm", id]).unwrap();
        assert!(rm.success(), "{id}: {rm:?}");
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// The same pod id again at once (`ctr run --rm` twice): the node serves the new pod on the
/// same address while the last one's server is on its way out. Pods that come and go keep
/// nothing in the node: no thread (a stdin FIFO whose writer never came once held one each,
/// and at 64 the node stopped serving), no fd.
#[test]
fn the_same_id_again_at_once_gets_a_new_server() {
    let Some(ctd) = start("the_same_id_again_at_once_gets_a_new_server") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "pn-keep", &rootfs);
    let node = shim_of(task_pid(&ctd, "pn-keep")).unwrap();
    let again = spec(&ctd, "pn-again", &rootfs, &["echo", "again"]);
    ctd.assert_runs_again(&again, 3, "again\n");
    std::thread::sleep(Duration::from_secs(2));
    let (threads, fds) = (count(node, "task"), count(node, "fd"));
    ctd.assert_runs_again(&again, 20, "again\n");
    // The blocking pool's threads go after 0.5 s idle.
    std::thread::sleep(Duration::from_secs(2));
    let (threads_after, fds_after) = (count(node, "task"), count(node, "fd"));
    assert!(
        threads_after <= threads + 2 && fds_after <= fds + 2,
        "20 pods later the node has {threads_after} threads (was {threads}), {fds_after} fds (was {fds})"
    );
    remove(&ctd, "pn-keep");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Entries in `/proc/<pid>/<dir>` (threads, fds).
fn count(pid: u32, dir: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/{dir}"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The node's control socket is root's alone: another host user cannot even open it (a pod
/// never sees the host's /run). A shell's `>` open tells "Permission denied" from the
/// "No such device or address" that root gets on any socket.
#[test]
fn another_host_user_cannot_reach_the_control_socket() {
    use std::os::unix::process::CommandExt;
    let Some(ctd) = start("another_host_user_cannot_reach_the_control_socket") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    run_detached(&ctd, "pu", &rootfs);
    let control = control_socket(&ctd);
    let script = format!("echo x > {}", control.display());
    let open_as = |uid: Option<u32>| {
        let mut c = std::process::Command::new("/bin/sh");
        c.args(["-c", &script]);
        if let Some(id) = uid {
            c.uid(id).gid(id);
        }
        String::from_utf8_lossy(&c.output().unwrap().stderr).into_owned()
    };
    let root = open_as(None);
    assert!(root.contains("No such device or address"), "root: {root}");
    let nobody = open_as(Some(65534));
    assert!(nobody.contains("Permission denied"), "nobody: {nobody}");
    remove(&ctd, "pu");
}

/// Holds the node lock as a `start` does while it hands a pod over.
fn hold_node_lock(control: &Path) -> Flock<File> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(format!("{}.lock", control.display()))
        .unwrap();
    Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap()
}

/// A node without pods leaves only if it gets the node lock at once: a `start` holding the
/// lock waits for the node to accept its connection, so a node waiting for the lock would
/// stall them both.
#[test]
fn a_held_node_lock_keeps_the_node_answering() {
    let Some(ctd) = start("a_held_node_lock_keeps_the_node_answering") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "pl", &rootfs);
    let node = shim_of(task_pid(&ctd, "pl")).unwrap();
    let control = control_socket(&ctd);
    let lock = hold_node_lock(&control);
    remove(&ctd, "pl");
    // The node's linger (2 s) runs out while the lock is held.
    std::thread::sleep(Duration::from_secs(4));
    assert!(alive(node), "the node left without the lock");
    let mut s = UnixStream::connect(&control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"junk\n").unwrap();
    let mut reply = String::new();
    BufReader::new(&s)
        .read_line(&mut reply)
        .expect("the node answers while the lock is held");
    assert!(reply.starts_with("bad request"), "{reply:?}");
    drop(lock);
    assert!(
        gone_within(node, GRACE),
        "the node left once the lock was free"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// The Kubernetes path: pods made through CRI with the `rund` handler (whose runtime options
/// name the per-node config) share the node's shim; removing one pod leaves the other served.
#[test]
fn cri_pods_share_the_node_shim() {
    let Some(ctd) = Containerd::start_rund_or_skip(
        "cri_pods_share_the_node_shim",
        per_node(ContainerdOpts::new().cri()),
    ) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let mut pods = Vec::new();
    for name in ["node-a", "node-b"] {
        let pod = PodSpec::new(name, &ctd.cgroup_parent);
        let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
        let work = ContainerSpec::new("work", BUSYBOX_IMAGE, &["sleep", "100000"]);
        let c = cri
            .create_and_start(&pod_id, &work, &pod)
            .expect("container");
        pods.push((pod_id, c));
    }
    let shims = shim_processes(&ctd);
    assert_eq!(shims.len(), 1, "one shim serves both pods: {shims:#?}");
    for (_, c) in &pods {
        let r = cri.exec_sync(c, &["echo", "served"], 10).unwrap();
        assert_eq!(
            (r.exit_code, r.stdout.as_slice()),
            (0, &b"served\n"[..]),
            "{r:?}"
        );
    }
    let (first, rest) = pods.split_first().unwrap();
    cri.stop_pod_sandbox(&first.0).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&first.0).expect("RemovePodSandbox");
    let r = cri.exec_sync(&rest[0].1, &["echo", "still"], 10).unwrap();
    assert_eq!(r.stdout, b"still\n", "{r:?}");
    assert_eq!(shim_processes(&ctd).len(), 1);
    cri.stop_pod_sandbox(&rest[0].0).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&rest[0].0)
        .expect("RemovePodSandbox");
    assert_no_leaks_within(&ctd, &before, GRACE);
    assert!(shim_processes(&ctd).is_empty(), "the node's shim left");
}
