//! Fault suite, processes killed: `kill -9` of one pod's shim while three pods run, and of a
//! sandbox agent. Each scenario checks the exit containerd reports, bounds every wait
//! generously (hangs only), and ends with nothing left: mounts, processes, cgroups, leases,
//! pool slots, state files, and the fd counts of containerd and of the shims that live on.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rund_tests::faults::probe::{ancestor_named, shim_of, shim_socket};
use rund_tests::faults::{FaultEnv, GRACE};
use rund_tests::ocispec::wait_gone;
use rund_tests::ContainerdOpts;

fn sigkill(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).expect("kill -9");
}

/// Every claimed cgroup came back through this test's own pool (so `delete` of a crashed shim
/// used the config the container named, not the node default).
fn assert_pool_returned(env: &FaultEnv, containers: u64) {
    let pool = env.pool_status();
    assert_eq!(pool["claimed"], 0, "cgroups still claimed: {pool}");
    let c = &pool["counters"];
    let back = c["recycles"].as_u64().unwrap_or(0) + c["removed"].as_u64().unwrap_or(0);
    assert_eq!(
        back, containers,
        "every container's cgroup is recycled or removed by this pool: {pool}"
    );
}

#[test]
fn shim_killed_with_three_pods_running() {
    let test = "shim_killed_with_three_pods_running";
    let userns = "[userns]\nmode = \"always\"\n";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new(), "", userns) else {
        return;
    };
    let before = env.leftovers(&[]);
    let events = env.ctd.watch_events().unwrap();
    let ids = ["p1", "p2", "p3"];
    for id in ids {
        env.run_detached(id, &["sleep", "100000"]);
    }
    let shims: Vec<u32> = ids
        .iter()
        .map(|id| shim_of(&env.ctd, id).unwrap_or_else(|| panic!("no shim for {id}")))
        .collect();
    assert_eq!(
        rund_tests::faults::probe::leases(&env.state).len(),
        3,
        "each pod leases an id range"
    );
    let running = env.leftovers(&[shims[0], shims[2]]);
    let workload = env.task_pid("p2");
    let socket = shim_socket(&env.ctd, "p2").expect("p2's shim socket");
    assert!(socket.exists(), "{}", socket.display());

    sigkill(shims[1]);
    let exit = events.wait_topic("p2", "/tasks/exit", GRACE).unwrap();
    assert_eq!(exit.body["exit_status"], 137, "{exit:?}");
    assert!(
        wait_gone(workload, GRACE),
        "the workload dies with its sandbox"
    );

    // The other pods are unaffected.
    for id in ["p1", "p3"] {
        assert_eq!(
            env.ctd.task_status(id).unwrap().as_deref(),
            Some("RUNNING"),
            "{id}"
        );
        let out = env.exec(id, "after", &["echo", "alive"]);
        assert_eq!(
            (out.code(), out.stdout.as_str()),
            (0, "alive\n"),
            "{id}: {out:?}"
        );
    }
    // containerd may already have dropped the dead shim's task.
    let _ = env.ctd.task_delete("p2", false);
    env.ctd
        .wait_for_status("p2", "absent", GRACE)
        .expect("the dead shim's task goes");
    env.ctd.container_delete("p2").unwrap().check().unwrap();
    // Nothing of p2 is left, and the surviving shims hold no more fds than before.
    env.assert_clean(&running);
    assert!(
        !socket.exists(),
        "the killed shim's socket is removed: {}",
        socket.display()
    );

    env.remove("p1");
    env.remove("p3");
    drop(events);
    env.assert_clean(&before);
    assert_pool_returned(&env, 3);
}

#[test]
fn agent_killed_reports_137_and_deletes() {
    let test = "agent_killed_reports_137_and_deletes";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new(), "", "") else {
        return;
    };
    let before = env.leftovers(&[]);
    let events = env.ctd.watch_events().unwrap();
    let workload = env.run_detached("a", &["sleep", "100000"]);
    let shim = shim_of(&env.ctd, "a").expect("shim of a");
    let agent = ancestor_named(workload, "rund-agent").expect("the workload's agent");

    sigkill(agent);
    let exit = events.wait_topic("a", "/tasks/exit", GRACE).unwrap();
    assert_eq!(exit.body["exit_status"], 137, "{exit:?}");
    assert!(
        wait_gone(workload, GRACE),
        "the workload dies with its agent"
    );
    env.ctd
        .wait_for_status("a", "STOPPED", GRACE)
        .expect("the task is stopped");

    let out = env.ctd.task_delete("a", false).unwrap().check().unwrap();
    assert!(out.stderr.contains("exit code 137"), "{out:?}");
    env.ctd.container_delete("a").unwrap().check().unwrap();
    assert!(
        wait_gone(shim, GRACE),
        "the shim exits after the last delete"
    );
    drop(events);
    env.assert_clean(&before);
    assert_pool_returned(&env, 1);
}

#[test]
fn shim_sigterm_publishes_every_exit() {
    let test = "shim_sigterm_publishes_every_exit";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new(), "", "") else {
        return;
    };
    let before = env.leftovers(&[]);
    env.run_detached("busy", &["sleep", "100000"]);
    let execs: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    for e in &execs {
        env.ctd
            .ctr(&[
                "task",
                "exec",
                "-d",
                "--exec-id",
                e,
                "busy",
                "sleep",
                "100000",
            ])
            .unwrap()
            .check()
            .unwrap();
    }
    let events = env.ctd.watch_events().unwrap();
    let shim = shim_of(&env.ctd, "busy").expect("shim of busy");

    // As on a node drain: the shim tears the sandbox down and, before it goes, publishes the
    // exit of every process it ran.
    kill(Pid::from_raw(shim as i32), Signal::SIGTERM).unwrap();
    assert!(wait_gone(shim, GRACE), "the shim exits after its teardown");
    for id in std::iter::once("busy").chain(execs.iter().map(String::as_str)) {
        let exit = events
            .wait_for(
                &format!("the exit of {id}"),
                |e| {
                    e.topic == "/tasks/exit"
                        && e.field("id") == Some(id)
                        && e.field("container_id") == Some("busy")
                },
                GRACE,
            )
            .unwrap();
        assert!(
            exit.body["exit_status"].as_u64().unwrap_or(0) > 0,
            "{exit:?}"
        );
    }
    let log = std::fs::read_to_string(&env.ctd.log).unwrap_or_default();
    let forwarded = log
        .lines()
        .filter(|l| l.contains("event forwarded") && l.contains("topic=/tasks/exit"))
        .count();
    assert!(
        forwarded >= 11,
        "the shim itself published the 11 exits ({forwarded} forwarded)"
    );
    let _ = env.ctd.task_delete("busy", false);
    env.ctd.wait_for_status("busy", "absent", GRACE).unwrap();
    env.ctd.container_delete("busy").unwrap().check().unwrap();
    drop(events);
    env.assert_clean(&before);
}
