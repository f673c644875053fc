//! The node's shim dies and its pods run on (per-node mode): its keeper holds containerd's
//! connections and the agents' sockets, starts the next node shim, and that one serves each
//! pod on from its record and its agent. Killing the keeper ends every pod, as before.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use std::time::{Duration, Instant};

use rund_tests::leaks::shim_processes;
use rund_tests::pernode::*;
use rund_tests::{
    assert_no_leaks_within, ContainerSpec, Containerd, ContainerdOpts, LeakSnapshot, PodSpec,
    RunSpec, BUSYBOX_IMAGE,
};

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, per_node(ContainerdOpts::new()))
}

/// Whether the node's shim of `generation` serves, within [`GRACE`].
fn serves(ctd: &Containerd, generation: u64) -> bool {
    let line = "serving control=";
    let gen = format!("generation={generation}");
    let deadline = Instant::now() + GRACE;
    loop {
        let log = node_log(ctd);
        if log.lines().any(|l| l.contains(line) && l.contains(&gen)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The keeper's open fds, once the count has held for a moment (pods close in the background).
fn settled_fds(keeper: u32) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{keeper}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let mut last = count();
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let now = count();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

fn task_line(ctd: &Containerd, id: &str) -> String {
    let out = ctd.ctr(&["task", "ls"]).unwrap();
    out.stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_default()
        .to_string()
}

/// SIGKILL the node shim: the running container keeps its pid and answers exec, one that
/// exits meanwhile reports its status, a new pod is served, and Delete cleans up.
#[test]
fn pods_run_on_after_the_node_shim_is_killed() {
    let Some(ctd) = start("pods_run_on_after_the_node_shim_is_killed") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "r1", &rootfs);
    let out = ctd
        .run_spec(&rund_tests::RunSpec {
            detach: true,
            ..spec(&ctd, "r2", &rootfs, &["sh", "-c", "sleep 2; exit 7"])
        })
        .unwrap();
    assert!(out.success(), "{out:?}");
    let task = task_pid(&ctd, "r1");
    let node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    kill9(node);

    let new = new_node(keeper, node).unwrap_or_else(|| {
        let ps = std::process::Command::new("ps")
            .args(["-eo", "pid,ppid,stat,comm"])
            .output()
            .unwrap();
        let status = std::fs::read_to_string(format!("/proc/{keeper}/status")).unwrap_or_default();
        let wchan = std::fs::read_to_string(format!("/proc/{keeper}/wchan")).unwrap_or_default();
        let fds = std::process::Command::new("ls").args(["-l", &format!("/proc/{keeper}/fd")]).output().unwrap();
        panic!(
            "no new node shim under keeper {keeper} (old {node}):\n{status}\nwchan {wchan}\n{}\n{}\n{}",
            String::from_utf8_lossy(&fds.stdout),
            String::from_utf8_lossy(&ps.stdout),
            node_log(&ctd)
        )
    });
    // Forked is not yet serving: the new node shim adopts the pods first.
    assert!(serves(&ctd, 1), "{}", node_log(&ctd));
    let log = node_log(&ctd);
    assert!(log.contains("starting generation 1"), "{log}");
    assert!(log.contains("pod adopted"), "{log}");
    assert_eq!(task_pid(&ctd, "r1"), task, "r1 runs on, same pid");

    let exec = ctd
        .ctr(&["task", "exec", "--exec-id", "e1", "r1", "echo", "after"])
        .unwrap();
    assert_eq!(
        (exec.code(), exec.stdout.as_str()),
        (0, "after\n"),
        "{exec:?}"
    );

    // r2 exits 7 about now, with the new node shim watching.
    let deadline = Instant::now() + GRACE;
    while !task_line(&ctd, "r2").contains("STOPPED") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        task_line(&ctd, "r2").contains("STOPPED"),
        "{}",
        task_line(&ctd, "r2")
    );
    let rm = ctd.ctr(&["task", "rm", "r2"]).unwrap();
    assert!(rm.success(), "{rm:?}");
    assert!(ctd.ctr(&["container", "rm", "r2"]).unwrap().success());
    let held = settled_fds(keeper);

    let out = ctd
        .run_spec(&spec(&ctd, "r3", &rootfs, &["echo", "new pod"]))
        .unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "new pod\n"),
        "{out:?}"
    );
    assert_eq!(
        settled_fds(keeper),
        held,
        "the keeper let go of every fd of the pod that came and went"
    );

    remove(&ctd, "r1");
    assert!(gone_within(new, GRACE), "the node left with its last pod");
    assert!(gone_within(keeper, GRACE), "and its keeper");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// An exit while no node shim runs waits in the agent, and is reported once one runs again.
#[test]
fn an_exit_while_the_node_is_down_is_reported() {
    let Some(ctd) = start("an_exit_while_the_node_is_down_is_reported") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "x1", &rootfs);
    let task = task_pid(&ctd, "x1");
    let node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    // Stop the keeper so no restart races the kill of x1's process.
    signal(keeper, nix::sys::signal::Signal::SIGSTOP);
    kill9(node);
    kill9(task);
    std::thread::sleep(Duration::from_millis(300));
    signal(keeper, nix::sys::signal::Signal::SIGCONT);
    let deadline = Instant::now() + GRACE;
    while !task_line(&ctd, "x1").contains("STOPPED") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        task_line(&ctd, "x1").contains("STOPPED"),
        "{}\n{}",
        task_line(&ctd, "x1"),
        node_log(&ctd)
    );
    let rm = ctd.ctr(&["task", "rm", "x1"]).unwrap();
    assert!(rm.success(), "{rm:?}");
    assert!(ctd.ctr(&["container", "rm", "x1"]).unwrap().success());
    assert!(
        gone_within(keeper, GRACE),
        "the keeper left with its last pod"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Two pods on one node shim: the pids of `b`'s task, of the node shim, of its keeper and of
/// `a`'s agent.
struct TwoPods {
    other: u32,
    node: u32,
    keeper: u32,
    agent: u32,
}

fn two_pods(ctd: &Containerd, a: &str, b: &str) -> TwoPods {
    let rootfs = ctd.busybox_rootfs().unwrap();
    run_detached(ctd, a, &rootfs);
    run_detached(ctd, b, &rootfs);
    let task = task_pid(ctd, a);
    let node = shim_of(task).unwrap();
    TwoPods {
        other: task_pid(ctd, b),
        node,
        keeper: ppid_and_comm(node).unwrap().0,
        agent: ppid_and_comm(task).unwrap().0,
    }
}

/// The node shim and a pod's agent die while the keeper cannot run: one SIGCHLD then stands
/// for both, and `waitpid` gives the keeper its oldest child, the node shim, first. The keeper
/// must still reap the agent at once (the node shim after it serves another pod, so no other
/// exit of the keeper's children comes to help). The next node shim serves that pod as ended,
/// its workload killed with its sandbox (137), and the other pod runs on.
#[test]
fn an_agent_that_died_beside_the_node_is_reaped() {
    let Some(ctd) = start("an_agent_that_died_beside_the_node_is_reaped") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let TwoPods {
        other,
        node,
        keeper,
        agent,
    } = two_pods(&ctd, "z1", "z2");
    let events = ctd.watch_events().unwrap();
    signal(keeper, nix::sys::signal::Signal::SIGSTOP);
    kill9(node);
    kill9(agent);
    // Both are the stopped keeper's zombies once the node's last thread is gone.
    let keepers_zombie =
        |pid| is_zombie(pid) && ppid_and_comm(pid).is_some_and(|(pp, _)| pp == keeper);
    let deadline = Instant::now() + GRACE;
    while !(keepers_zombie(node) && keepers_zombie(agent)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        keepers_zombie(agent),
        "the agent is the stopped keeper's ({keeper}) zombie: {}; node: {}",
        describe(agent),
        describe(node)
    );
    signal(keeper, nix::sys::signal::Signal::SIGCONT);
    assert!(
        gone_within(agent, GRACE),
        "the keeper left the agent unreaped: {}",
        describe(agent)
    );
    // The next node shim serves z1 as ended: its workload went with the sandbox's PID 1.
    let exit = events
        .wait_for(
            "z1's exit",
            |e| e.topic == "/tasks/exit" && e.field("id") == Some("z1"),
            GRACE,
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", node_log(&ctd)));
    assert_eq!(exit.body["exit_status"], 137, "{exit:?}");
    ctd.wait_for_status("z1", "STOPPED", GRACE)
        .unwrap_or_else(|e| panic!("{e}\n{}", node_log(&ctd)));
    assert!(
        node_log(&ctd).contains("the pod's agent died meanwhile"),
        "{}",
        node_log(&ctd)
    );
    assert!(alive(other), "z2 runs on");
    assert_eq!(task_pid(&ctd, "z2"), other);
    let out = ctd.task_delete("z1", false).unwrap().check().unwrap();
    assert!(out.stderr.contains("exit code 137"), "{out:?}");
    drop(events);
    remove(&ctd, "z2");
    assert!(ctd.ctr(&["container", "rm", "z1"]).unwrap().success());
    assert!(
        gone_within(keeper, GRACE),
        "the keeper left with its last pod"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// The node shim dies serving a request (a failpoint at z1's Start): the next node shim answers
/// it with UNAVAILABLE instead of leaving containerd waiting on it, and serves the pod on.
#[test]
fn a_request_open_when_the_node_shim_dies_is_answered_with_an_error() {
    let test = "a_request_open_when_the_node_shim_dies_is_answered_with_an_error";
    let opts = ContainerdOpts {
        env: vec![("RUND_FAILPOINT".into(), "start@o1".into())],
        ..ContainerdOpts::new()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(test, per_node(opts)) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "o2", &rootfs);
    let other = task_pid(&ctd, "o2");
    let node = shim_of(other).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    let started = ctd.run_spec(&RunSpec {
        detach: true,
        timeout: GRACE,
        ..spec(&ctd, "o1", &rootfs, &["sleep", "100000"])
    });
    let out = match started {
        Ok(out) => out,
        Err(e) => panic!("ctr waited on the lost Start: {e}\n{}", node_log(&ctd)),
    };
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr
            .contains("node shim died while serving this request"),
        "{out:?}\n{}",
        node_log(&ctd)
    );
    assert!(
        node_log(&ctd).contains("failpoint start"),
        "{}",
        node_log(&ctd)
    );
    let first = new_node(keeper, node).expect("a new node shim");
    assert!(serves(&ctd, 1), "{}", node_log(&ctd));
    // Answered once: the node shim after the next crash does not answer it again.
    kill9(first);
    let new = new_node(keeper, first).expect("a third node shim");
    assert!(serves(&ctd, 2), "{}", node_log(&ctd));
    let answers = node_log(&ctd).matches("answering a request").count();
    assert_eq!(answers, 1, "{}", node_log(&ctd));
    // The pod is served on: o1 was created, never started, and goes (a created task takes
    // --force, as with runc); o2 runs on.
    assert_eq!(
        ctd.task_status("o1").unwrap().as_deref(),
        Some("CREATED"),
        "{}",
        node_log(&ctd)
    );
    ctd.task_delete("o1", true).unwrap().check().unwrap();
    assert!(ctd.ctr(&["container", "rm", "o1"]).unwrap().success());
    assert_eq!(task_pid(&ctd, "o2"), other, "o2 runs on");
    remove(&ctd, "o2");
    assert!(gone_within(new, GRACE), "the node left with its last pod");
    assert!(gone_within(keeper, GRACE), "and its keeper");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Whether a pod record of the node says its agent ended with `status`.
fn recorded_agent_exit(ctd: &Containerd, status: u32) -> bool {
    let state = ctd.dir.join("rund-state");
    let want = format!("\"exit\":{status}");
    std::fs::read_dir(&state)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pods"))
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .any(|r| std::fs::read_to_string(r.path()).is_ok_and(|t| t.contains(&want)))
}

/// A pod whose agent died while the node shim ran (it reaped it; the task is STOPPED, 137)
/// is served as ended by the next node shim, from its record: the pid it would reach is gone,
/// and no keeper's word about it will come.
#[test]
fn a_pod_that_ended_before_the_node_shim_died_stays_ended() {
    let Some(ctd) = start("a_pod_that_ended_before_the_node_shim_died_stays_ended") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let TwoPods {
        other,
        node,
        keeper,
        agent,
    } = two_pods(&ctd, "e1", "e2");
    kill9(agent);
    ctd.wait_for_status("e1", "STOPPED", GRACE).unwrap();
    let deadline = Instant::now() + GRACE;
    while !recorded_agent_exit(&ctd, 137) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        recorded_agent_exit(&ctd, 137),
        "the record keeps the agent's end: {:?}",
        std::fs::read_dir(ctd.dir.join("rund-state"))
            .unwrap()
            .flatten()
            .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
            .map(|r| std::fs::read_to_string(r.path()).unwrap_or_default())
            .collect::<Vec<_>>()
    );
    kill9(node);
    let new = new_node(keeper, node).expect("a new node shim");
    assert!(serves(&ctd, 1), "{}", node_log(&ctd));
    let settled = || {
        let log = node_log(&ctd);
        log.contains("pod not adopted") || log.matches("pod adopted").count() >= 2
    };
    let deadline = Instant::now() + GRACE;
    while !settled() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = node_log(&ctd);
    assert!(
        !log.contains("pod not adopted") && log.matches("pod adopted").count() == 2,
        "{log}"
    );
    assert_eq!(ctd.task_status("e1").unwrap().as_deref(), Some("STOPPED"));
    let out = ctd.task_delete("e1", false).unwrap().check().unwrap();
    assert!(out.stderr.contains("exit code 137"), "{out:?}");
    assert!(ctd.ctr(&["container", "rm", "e1"]).unwrap().success());
    assert_eq!(task_pid(&ctd, "e2"), other, "e2 runs on");
    remove(&ctd, "e2");
    assert!(gone_within(new, GRACE), "the node left with its last pod");
    assert!(gone_within(keeper, GRACE), "and its keeper");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Killed, the keeper takes the node shim and every pod with it: containerd cleans up. The
/// control socket and lock file they could not remove do not stop the next pod: it gets a new
/// node, which removes both when it leaves.
#[test]
fn a_killed_keeper_ends_every_pod() {
    let Some(ctd) = start("a_killed_keeper_ends_every_pod") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "k1", &rootfs);
    let task = task_pid(&ctd, "k1");
    let node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    let agents = children_named(node, "rund-agent");
    kill9(keeper);
    assert!(
        gone_within(node, GRACE),
        "the node shim went with its keeper"
    );
    for pid in agents {
        assert!(gone_within(pid, GRACE), "agent {pid} went too");
    }
    assert!(gone_within(task, GRACE));
    remove(&ctd, "k1");
    assert!(control_socket(&ctd).exists(), "a SIGKILL leaves the socket");
    run_detached(&ctd, "k2", &rootfs);
    let next = shim_of(task_pid(&ctd, "k2")).unwrap();
    assert_ne!(next, node, "a new node serves k2");
    remove(&ctd, "k2");
    assert!(gone_within(next, GRACE), "the new node left with k2");
    assert_node_files_gone(&ctd);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A node shim that keeps dying is restarted 5 times within a minute, then the keeper gives
/// up and every pod goes with it, cleaned up by containerd as after any shim crash; the keeper
/// removes the control socket and lock file its dead shims left.
#[test]
fn a_node_shim_that_keeps_dying_takes_its_pods_down() {
    let Some(ctd) = start("a_node_shim_that_keeps_dying_takes_its_pods_down") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "d1", &rootfs);
    let task = task_pid(&ctd, "d1");
    let mut node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    for restart in 1..=5 {
        kill9(node);
        node = new_node(keeper, node).unwrap_or_else(|| panic!("restart {restart}"));
        // Each generation adopts d1 before the next kill.
        assert!(serves(&ctd, restart), "{}", node_log(&ctd));
    }
    assert_eq!(task_pid(&ctd, "d1"), task, "d1 ran through 5 restarts");
    kill9(node);
    assert!(gone_within(keeper, GRACE), "the keeper gave up");
    assert!(gone_within(task, GRACE), "and d1 went with it");
    assert!(node_log(&ctd).contains("giving up"), "{}", node_log(&ctd));
    assert_node_files_gone(&ctd);
    remove(&ctd, "d1");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// The Kubernetes path: a CRI pod runs on through a node shim restart; exec, stop and remove
/// work on the new node shim.
#[test]
fn a_cri_pod_runs_on_after_the_node_shim_is_killed() {
    let Some(ctd) = Containerd::start_rund_or_skip(
        "a_cri_pod_runs_on_after_the_node_shim_is_killed",
        per_node(ContainerdOpts::new().cri()),
    ) else {
        return;
    };
    let cri = ctd.cri_client().expect("CRI client");
    let before = LeakSnapshot::take(&ctd);
    let pod = PodSpec::new("restart-a", &ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let work = ContainerSpec::new("work", BUSYBOX_IMAGE, &["sleep", "100000"]);
    let c = cri
        .create_and_start(&pod_id, &work, &pod)
        .expect("container");
    let shims = shim_processes(&ctd);
    assert_eq!(shims.len(), 1, "{shims:#?}");
    let node = shims[0].pid;
    let (keeper, _) = ppid_and_comm(node).unwrap();
    kill9(node);
    let new = new_node(keeper, node).expect("a new node shim");
    assert!(serves(&ctd, 1), "{}", node_log(&ctd));
    let r = cri.exec_sync(&c, &["echo", "served"], 10).unwrap();
    assert_eq!(
        (r.exit_code, r.stdout.as_slice()),
        (0, &b"served\n"[..]),
        "{r:?}\n{}",
        node_log(&ctd)
    );
    cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    cri.remove_pod_sandbox(&pod_id).expect("RemovePodSandbox");
    assert!(gone_within(new, GRACE), "the node left with its last pod");
    assert!(gone_within(keeper, GRACE), "and its keeper");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `ctr run` (with a tty: `-t`; without, ctr feeds its own stdin) in per-node mode: `sh`
/// reads lines and echoes them back.
fn interactive(ctd: &Containerd, tty: bool, id: &str) -> rund_tests::containerd::PtyCtr {
    let rootfs = ctd.busybox_rootfs().unwrap().display().to_string();
    let cfg = config_flags(ctd);
    let mut args = vec!["run", "--rm", "--runtime", RUND];
    if tty {
        args.push("-t");
    }
    args.extend(cfg.iter().map(String::as_str));
    args.extend(["--env", rund_tests::containerd::ROOTFS_PATH_ENV]);
    args.extend(["--rootfs", &rootfs, id, "sh", "-c"]);
    args.push(r#"echo ready; while read l; do echo "got:$l"; done; echo eof"#);
    let term = ctd.ctr_pty(&args, 24, 80).unwrap();
    term.wait_output("ready", GRACE).unwrap();
    term
}

/// A process's terminal and its stdin are copied on by the next node shim: lines typed after
/// the restart reach the process and its answers come back; EOF still ends stdin.
#[test]
fn a_tty_and_stdin_go_on_after_the_node_shim_is_killed() {
    let Some(ctd) = start("a_tty_and_stdin_go_on_after_the_node_shim_is_killed") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let tty = interactive(&ctd, true, "tt");
    let stdin = interactive(&ctd, false, "ti");
    for term in [&tty, &stdin] {
        term.send(b"one\n").unwrap();
        term.wait_output("got:one", GRACE).unwrap();
    }
    let task = task_pid(&ctd, "tt");
    let node = shim_of(task).unwrap();
    let (keeper, _) = ppid_and_comm(node).unwrap();
    kill9(node);
    new_node(keeper, node).expect("a new node shim");
    assert!(serves(&ctd, 1), "{}", node_log(&ctd));
    for term in [&tty, &stdin] {
        term.send(b"two\n").unwrap();
        let out = term.wait_output("got:two", GRACE).unwrap();
        assert!(out.contains("got:two"), "{out:?}\n{}", node_log(&ctd));
    }
    // ^D: ctr closes the stdin FIFO, the process reads EOF and exits 0.
    stdin.send(b"\x04").unwrap();
    let (status, out) = stdin.wait(GRACE).unwrap();
    assert_eq!(status.code(), Some(0), "{out:?}");
    assert!(out.contains("eof"), "{out:?}");
    ctd.task_kill("tt", "SIGKILL", false).unwrap();
    let (status, out) = tty.wait(GRACE).unwrap();
    assert_eq!(status.code(), Some(137), "{out:?}");
    assert!(
        gone_within(keeper, GRACE),
        "the node left with its last pod"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}
