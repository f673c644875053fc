//! Task API semantics rund shares with runc: `kill --all` reaches a daemon that left its
//! container's process tree (by cgroup, not by parent pids) when the container shares the
//! sandbox's pid namespace; real-time signals 32-64 are delivered; `ctr task ps` names the exec
//! each process belongs to; execs started together all answer. `RUND_IT_RUNTIME=io.containerd.runc.v2` runs them against runc.

use std::path::Path;
use std::time::{Duration, Instant};

use rund_tests::ocispec::{is_alive, wait_gone, ConfigRun};
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, Containerd, ContainerdOpts, LeakSnapshot, RunSpec,
};

const GRACE: Duration = Duration::from_secs(60);

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_under_test(test, ContainerdOpts::new())
}

fn detached(id: &str, rootfs: &Path, args: &[&str]) -> RunSpec {
    RunSpec {
        id: id.into(),
        rootfs: Some(rootfs.into()),
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        detach: true,
        ..RunSpec::new(&runtime_under_test())
    }
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

/// Host pids whose command line is exactly `cmd`, polled until one shows up.
fn wait_for_cmd(cmd: &str) -> u32 {
    let deadline = Instant::now() + GRACE;
    loop {
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find(|p| cmdline(*p) == cmd);
        if let Some(p) = found {
            return p;
        }
        assert!(Instant::now() < deadline, "no process {cmd:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn kill_all_reaches_a_daemon_reparented_out_of_the_container() {
    let Some(ctd) = start("kill_all_reaches_a_daemon_reparented_out_of_the_container") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let events = ctd.events().unwrap();
    // The subshell exits at once: its `sleep 1731` is reparented to the pid namespace's init
    // (the sandbox agent), out of the container's process tree but not out of its cgroup.
    let script = "(busybox setsid sleep 1731 &); exec sleep 1732";
    let mut spec = ctd
        .oci_spec("shared", &rootfs, &["sh", "-c", script])
        .unwrap();
    let ns = spec["linux"]["namespaces"].as_array_mut().unwrap();
    ns.retain(|n| n["type"] != "pid");
    let opts = ConfigRun {
        detach: true,
        ..Default::default()
    };
    ctd.run_config("shared", &spec, &opts)
        .unwrap()
        .check()
        .unwrap();
    let daemon = wait_for_cmd("sleep 1731");
    let init = wait_for_cmd("sleep 1732");

    ctd.task_kill("shared", "SIGKILL", true).unwrap();
    assert_eq!(events.wait_task_exit("shared", GRACE).unwrap(), 137);
    assert!(wait_gone(init, GRACE), "the init is killed");
    assert!(
        wait_gone(daemon, GRACE),
        "kill --all must reach the reparented daemon: {} still runs",
        cmdline(daemon)
    );
    ctd.wait_for_status("shared", "STOPPED", GRACE).unwrap();
    ctd.task_delete("shared", false).unwrap().check().unwrap();
    ctd.container_delete("shared").unwrap().check().unwrap();
    drop(events);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn real_time_signals_are_delivered() {
    let Some(ctd) = start("real_time_signals_are_delivered") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let events = ctd.events().unwrap();
    for (id, sig, code) in [("rt34", 34, 3), ("rt40", 40, 4), ("rt64", 64, 6)] {
        // The shell exits with `code` once it took the signal.
        let script = format!("trap 'exit {code}' {sig}; while :; do sleep 0.1; done");
        ctd.run_spec(&detached(id, &rootfs, &["sh", "-c", &script]))
            .unwrap()
            .check()
            .unwrap();
        // `sleep 0.1` runs only once the trap is set.
        let deadline = Instant::now() + GRACE;
        while ctd.task_ps(id).map(|p| p.len()).unwrap_or(0) < 2 {
            assert!(Instant::now() < deadline, "{id}: the loop never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = ctd.task_kill(id, &sig.to_string(), false);
        assert!(out.is_ok(), "signal {sig} is a valid signal: {out:?}");
        assert_eq!(
            events.wait_task_exit(id, GRACE).unwrap(),
            code,
            "{id}: the workload caught signal {sig}"
        );
        ctd.wait_for_status(id, "STOPPED", GRACE).unwrap();
        let _ = ctd.task_delete(id, false).unwrap();
        ctd.container_delete(id).unwrap().check().unwrap();
    }
    drop(events);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn task_ps_names_exec_processes() {
    let Some(ctd) = start("task_ps_names_exec_processes") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    ctd.run_spec(&detached("ps", &rootfs, &["sleep", "100000"]))
        .unwrap()
        .check()
        .unwrap();
    ctd.ctr(&[
        "task",
        "exec",
        "-d",
        "--exec-id",
        "side-job",
        "ps",
        "sleep",
        "4242",
    ])
    .unwrap()
    .check()
    .unwrap();
    let exec_pid = wait_for_cmd("sleep 4242");
    let init_pid = ctd
        .task_list()
        .unwrap()
        .into_iter()
        .find(|t| t.id == "ps")
        .unwrap()
        .pid;
    let out = ctd.ctr(&["task", "ps", "ps"]).unwrap().check().unwrap();
    let row = |pid: u32| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("no row for pid {pid}: {}", out.stdout))
            .to_owned()
    };
    // ctr 1.6 prints the details as `ExecID:side-job`, ctr 2.x as `exec_id:"side-job"`.
    let names_exec = |r: &str| r.contains("ExecID:") || r.contains("exec_id:");
    assert!(
        names_exec(&row(exec_pid)) && row(exec_pid).contains("side-job"),
        "the exec's row names it: {}",
        out.stdout
    );
    assert!(
        !names_exec(&row(init_pid)),
        "the init's row names no exec: {}",
        out.stdout
    );
    assert!(is_alive(exec_pid));
    ctd.remove_container("ps");
    ctd.wait_for_status("ps", "absent", GRACE).unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Execs started together all answer. Each exec is a raw clone3 of the
/// agent that forks again into the container's pid namespace; with libc's
/// fork there (a musl agent), about one exec in twenty waited for ever on a
/// lock copied from the agent's thread that was creating a thread (checked:
/// 17 of 300 hung at 20 at a time).
#[test]
fn concurrent_execs_all_answer() {
    let Some(ctd) = start("concurrent_execs_all_answer") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    ctd.run_spec(&detached("ex", &rootfs, &["sleep", "100000"]))
        .unwrap()
        .check()
        .unwrap();
    const AT_ONCE: usize = 20;
    const ROUNDS: usize = 5;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..AT_ONCE)
                .map(|i| {
                    let ctd = &ctd;
                    s.spawn(move || {
                        let id = format!("e{round}-{i}");
                        let args: Vec<String> = ["task", "exec", "--exec-id", &id, "ex", "true"]
                            .iter()
                            .map(|a| (*a).to_owned())
                            .collect();
                        let out =
                            ctd.ctr_full(&ctd.namespace, &args, None, Duration::from_secs(30));
                        (id, out)
                    })
                })
                .collect();
            for r in runs {
                let (id, out) = r.join().unwrap();
                match out {
                    Ok(o) if o.success() => {}
                    Ok(o) => failed.push(format!("{id}: {o:?}")),
                    Err(e) => failed.push(format!("{id}: {e}")),
                }
            }
        });
    }
    assert!(
        failed.is_empty(),
        "{} of {} execs failed or hung: {failed:?}",
        failed.len(),
        AT_ONCE * ROUNDS
    );
    ctd.remove_container("ex");
    ctd.wait_for_status("ex", "absent", GRACE).unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}
