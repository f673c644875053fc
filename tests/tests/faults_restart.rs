//! Fault suite, containerd restarted with pods running (a service restart: SIGTERM, then the
//! same root, state and sockets): the tasks stay RUNNING, exec, kill and delete work through
//! the reconnected shims, and a workload that exits while containerd is down reports its real
//! exit code (containerd 1.6; 2.x deletes such a task's shim as leaked). Nothing is left
//! afterwards.

use std::time::{Duration, Instant};

use rund_tests::containerd::line;
use rund_tests::faults::probe::shim_of;
use rund_tests::faults::{FaultEnv, GRACE};
use rund_tests::ocispec::{is_alive, wait_gone};
use rund_tests::ContainerdOpts;

#[test]
fn containerd_restart_keeps_pods_running() {
    let test = "containerd_restart_keeps_pods_running";
    let Some(mut env) = FaultEnv::start(test, ContainerdOpts::new(), "", "") else {
        return;
    };
    let mut before = env.leftovers(&[]);
    let go = env.rootfs.join("tmp/go-quits");
    let _ = std::fs::remove_file(&go);
    env.run_detached("long", &["sleep", "100000"]);
    // Exits 7 once the host creates /tmp/go-quits in the shared rootfs.
    let quits = env.run_detached(
        "quits",
        &[
            "sh",
            "-c",
            "while [ ! -e /tmp/go-quits ]; do sleep 0.1; done; exit 7",
        ],
    );
    let shims = [
        shim_of(&env.ctd, "long").expect("shim of long"),
        shim_of(&env.ctd, "quits").expect("shim of quits"),
    ];

    env.ctd.stop();
    std::fs::write(&go, "").unwrap();
    assert!(
        wait_gone(quits, GRACE),
        "the workload exits while containerd is down"
    );
    assert!(
        shims.iter().all(|&s| is_alive(s)),
        "shims outlive containerd"
    );
    env.ctd.start_again().expect("containerd starts again");
    // containerd's fd count is compared with the new process from here on.
    let restarted = env.leftovers(&[]);

    let deadline = Instant::now() + GRACE;
    while env.ctd.task_status("long").unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        env.ctd.task_status("long").unwrap().as_deref(),
        Some("RUNNING")
    );
    if line::selected().is_ok_and(|b| b.is_v2()) {
        // containerd 2.x treats a loaded task shim with no process left as leaked
        // (containerd#6860: it asks Pids, finds none, and deletes the shim), for every
        // runtime: the task is gone, and so must be its shim and all it held.
        let deadline = Instant::now() + GRACE;
        while env.ctd.task_status("quits").unwrap().is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(env.ctd.task_status("quits").unwrap(), None);
        assert!(wait_gone(shims[1], GRACE), "the leaked shim is deleted");
        env.ctd.container_delete("quits").unwrap().check().unwrap();
    } else {
        env.ctd
            .wait_for_status("quits", "STOPPED", GRACE)
            .expect("the exited workload is STOPPED");
        let out = env
            .ctd
            .task_delete("quits", false)
            .unwrap()
            .check()
            .unwrap();
        assert!(
            out.stderr.contains("exit code 7"),
            "the real exit code is reported: {out:?}"
        );
        env.ctd.container_delete("quits").unwrap().check().unwrap();
    }

    let out = env.exec("long", "after", &["echo", "still here"]);
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "still here\n"),
        "{out:?}"
    );
    let events = env.ctd.watch_events().unwrap();
    env.ctd.task_kill("long", "SIGKILL", false).unwrap();
    let exit = events
        .wait_for(
            "the exit of long's init",
            |e| e.topic == "/tasks/exit" && e.field("id") == Some("long"),
            GRACE,
        )
        .unwrap();
    assert_eq!(exit.body["exit_status"], 137, "{exit:?}");
    env.ctd.wait_for_status("long", "STOPPED", GRACE).unwrap();
    env.ctd.task_delete("long", false).unwrap().check().unwrap();
    env.ctd.container_delete("long").unwrap().check().unwrap();
    drop(events);
    std::fs::remove_file(&go).unwrap();
    before.containerd_fds = restarted.containerd_fds;
    env.assert_clean(&before);
}
