//! The Task API through containerd and ctr: Exec (with and without a tty, its
//! events, refused once init exited, a bad binary, an unknown exec id), ResizePty, CloseIO,
//! Pause/Resume (freezer + events), Stats, Update (over gRPC: ctr 1.6 has no `task update`),
//! OOM (TaskOOM before TaskExit) and Checkpoint (UNIMPLEMENTED).
//!
//! `RUND_IT_RUNTIME=io.containerd.runc.v2` runs them against runc to check the tests; there
//! the Checkpoint test only expects a failure (runc needs CRIU).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rund_tests::cmd::{run_fed, Feeder, DEFAULT_TIMEOUT};
use rund_tests::containerd::{Event, ROOTFS_PATH_ENV};
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, Containerd, ContainerdOpts, LeakSnapshot, RunSpec,
    RUND_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);
const LONG: Duration = Duration::from_secs(60);
/// Waits, in a container shell, until `stty size` is `$1` (bounded), then prints `$2<size>`.
const WAIT_SIZE: &str = r#"i=0; while [ "$(stty size)" != "$1" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done; echo "$2$(stty size)""#;

fn rt() -> String {
    runtime_under_test()
}

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_under_test(test, ContainerdOpts::new())
}

fn spec(ctd: &Containerd, id: &str, args: &[&str], flags: &[&str]) -> RunSpec {
    RunSpec {
        id: id.into(),
        rootfs: Some(ctd.busybox_rootfs().unwrap()),
        args: args.iter().map(|s| s.to_string()).collect(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
        detach: true,
        ..RunSpec::new(&rt())
    }
}

/// `ctr run -d` of `args`, waited until RUNNING.
fn run_bg(ctd: &Containerd, id: &str, args: &[&str], flags: &[&str]) {
    ctd.run_spec(&spec(ctd, id, args, flags))
        .unwrap()
        .check()
        .unwrap();
    ctd.wait_for_status(id, "RUNNING", GRACE).unwrap();
}

fn sleeper(ctd: &Containerd, id: &str) {
    run_bg(ctd, id, &["sleep", "100000"], &[]);
}

/// Remove container `id` and check the instance is back to `before`.
fn finish(ctd: &Containerd, id: &str, before: &LeakSnapshot) {
    ctd.remove_container(id);
    assert_no_leaks_within(ctd, before, GRACE);
}

/// The host cgroup file of task `id` (cgroupsPath `/<namespace>/<id>`, as ctr sets it):
/// `v1` under the controller's hierarchy, else `v2` on the unified one.
fn cg_file(ctd: &Containerd, id: &str, controller: &str, v1: &str, v2: &str) -> PathBuf {
    let v1_root = Path::new("/sys/fs/cgroup").join(controller);
    if v1_root.is_dir() {
        v1_root.join(&ctd.namespace).join(id).join(v1)
    } else {
        Path::new("/sys/fs/cgroup")
            .join(&ctd.namespace)
            .join(id)
            .join(v2)
    }
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_owned()
}

/// Freezer state as v1 names it (v2's cgroup.freeze 1/0 mapped to FROZEN/THAWED).
fn freezer_state(ctd: &Containerd, id: &str) -> String {
    let p = cg_file(ctd, id, "freezer", "freezer.state", "cgroup.freeze");
    match read_trim(&p).as_str() {
        "1" => "FROZEN".into(),
        "0" => "THAWED".into(),
        s => s.to_owned(),
    }
}

/// Poll `probe` until it returns `Some`, or panic with `what` after `timeout`.
fn poll<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `s` split at whitespace, for fixed ctr argument lists.
fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

fn index_of(events: &[Event], pred: impl Fn(&Event) -> bool) -> Option<usize> {
    events.iter().position(pred)
}

#[test]
fn exec_without_tty_shows_output_code_and_events() {
    let Some(ctd) = start("exec_without_tty_shows_output_code_and_events") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let events = ctd.watch_events().unwrap();
    sleeper(&ctd, "c");
    let script = "echo out; echo err >&2; exit 6";
    let out = ctd
        .task_exec("c", "e1", &["sh", "-c", script], None)
        .unwrap();
    assert_eq!(out.code(), 6, "{out:?}");
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n")
    );

    // ExecAdded, then ExecStarted, then the exec's Exit with its status.
    let of_e1 = |e: &Event| e.field("exec_id") == Some("e1") || e.field("id") == Some("e1");
    let exit = events.wait_topic("e1", "/tasks/exit", GRACE).unwrap();
    assert_eq!(exit.field("container_id"), Some("c"), "{exit:?}");
    assert_eq!(exit.body["exit_status"], 6, "{exit:?}");
    let seen: Vec<Event> = events.events().into_iter().filter(of_e1).collect();
    let topics: Vec<&str> = seen.iter().map(|e| e.topic.as_str()).collect();
    let added = index_of(&seen, |e| e.topic == "/tasks/exec-added");
    let started = index_of(&seen, |e| e.topic == "/tasks/exec-started");
    let exited = index_of(&seen, |e| e.topic == "/tasks/exit");
    assert!(
        matches!((added, started, exited), (Some(a), Some(s), Some(x)) if a < s && s < x),
        "exec events out of order: {topics:?}"
    );
    // The container itself is untouched.
    assert_eq!(ctd.task_status("c").unwrap().as_deref(), Some("RUNNING"));
    finish(&ctd, "c", &before);
}

#[test]
fn exec_with_tty() {
    let Some(ctd) = start("exec_with_tty") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    sleeper(&ctd, "c");
    // rund hands over a pty from the host's devpts: it is a terminal, but
    // its name does not resolve inside (the container's devpts is its own instance).
    let script = format!("[ -t 0 ] && echo is-a-tty; {WAIT_SIZE}; exec sleep 100000");
    let mut args = words("task exec -t --exec-id t1 c sh -c");
    args.extend([script.as_str(), "sh", "33 111", "size:"]);
    let term = ctd.ctr_pty(&args, 33, 111).unwrap();
    // Seen on screen while the exec still runs (ctr may drop a tty's last output at exit).
    term.wait_output("size:", LONG).unwrap();
    let kill = words("task kill --exec-id t1 --signal SIGKILL c");
    ctd.ctr(&kill).unwrap().check().unwrap();
    let (status, out) = term.wait(LONG).unwrap();
    assert_eq!(status.code(), Some(137), "{out:?}");
    assert!(
        out.lines().any(|l| l.trim() == "is-a-tty"),
        "stdin of an exec -t must be a terminal: {out:?}"
    );
    assert!(
        out.contains("size:33 111"),
        "stty size in the exec: {out:?}"
    );
    finish(&ctd, "c", &before);
}

#[test]
fn exec_after_init_exit_is_refused() {
    let Some(ctd) = start("exec_after_init_exit_is_refused") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    ctd.run_spec(&spec(&ctd, "done", &["true"], &[]))
        .unwrap()
        .check()
        .unwrap();
    ctd.wait_for_status("done", "STOPPED", GRACE).unwrap();
    let out = ctd.task_exec("done", "late", &["true"], None).unwrap();
    assert!(!out.success(), "exec into a stopped container: {out:?}");
    let err = out.stderr.to_lowercase();
    assert!(
        err.contains("not running") || err.contains("stopped"),
        "the error should say the container is not running: {:?}",
        out.stderr
    );
    finish(&ctd, "done", &before);
}

#[test]
fn exec_bad_binary_fails_and_leaves_nothing() {
    let Some(ctd) = start("exec_bad_binary_fails_and_leaves_nothing") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    sleeper(&ctd, "c");
    let pids = ctd.task_ps("c").unwrap();
    let running = LeakSnapshot::take(&ctd);
    let out = ctd
        .task_exec("c", "bad", &["/bin/no-such-binary"], None)
        .unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr.contains("no-such-binary"),
        "the error should name the binary: {:?}",
        out.stderr
    );
    assert_no_leaks_within(&ctd, &running, GRACE);
    assert_eq!(ctd.task_ps("c").unwrap(), pids, "processes changed");
    // The failed exec left no record behind: its id can be used again.
    let out = ctd.task_exec("c", "bad", &["echo", "again"], None).unwrap();
    assert_eq!((out.code(), out.stdout.as_str()), (0, "again\n"), "{out:?}");
    assert_eq!(ctd.task_status("c").unwrap().as_deref(), Some("RUNNING"));
    finish(&ctd, "c", &before);
}

#[test]
fn kill_unknown_exec_id_is_not_found() {
    let Some(ctd) = start("kill_unknown_exec_id_is_not_found") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    sleeper(&ctd, "c");
    let out = ctd
        .ctr(&words("task kill --exec-id nope --signal SIGKILL c"))
        .unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr.to_lowercase().contains("not found"),
        "kill of an unknown exec should be NOT_FOUND: {:?}",
        out.stderr
    );
    assert_eq!(ctd.task_status("c").unwrap().as_deref(), Some("RUNNING"));
    finish(&ctd, "c", &before);
}

#[test]
fn resize_pty_changes_the_size_seen_inside() {
    let Some(ctd) = start("resize_pty_changes_the_size_seen_inside") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let rootfs = ctd.busybox_rootfs().unwrap().display().to_string();
    // First the size ctr had at start, then (after the test resizes) the new one.
    let script = format!(
        r#"set -- "33 111" "A:"; {WAIT_SIZE}; set -- "40 100" "B:"; {WAIT_SIZE}; exec sleep 100000"#
    );
    let rt = rt();
    let mut args = words("run -t --rm --runtime");
    args.extend([rt.as_str(), "--env", ROOTFS_PATH_ENV, "--rootfs", &rootfs]);
    args.extend(["tty", "sh", "-c", &script]);
    let term = ctd.ctr_pty(&args, 33, 111).unwrap();
    let out = term.wait_output("A:", LONG).unwrap();
    assert!(out.contains("A:33 111"), "initial size: {out:?}");
    term.resize(40, 100).unwrap();
    let out = term.wait_output("B:", LONG).unwrap();
    assert!(out.contains("B:40 100"), "size after SIGWINCH: {out:?}");
    ctd.task_kill("tty", "SIGKILL", false).unwrap();
    let (status, out) = term.wait(LONG).unwrap();
    assert_eq!(status.code(), Some(137), "{out:?}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn tty_input_reaches_the_process() {
    let Some(ctd) = start("tty_input_reaches_the_process") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let rootfs = ctd.busybox_rootfs().unwrap().display().to_string();
    let rt = rt();
    let mut args = words("run -t --rm --runtime");
    args.extend([
        rt.as_str(),
        "--env",
        ROOTFS_PATH_ENV,
        "--rootfs",
        &rootfs,
        "in",
    ]);
    args.extend([
        "sh",
        "-c",
        r#"echo ready; read line; echo "got:$line"; sleep 100000"#,
    ]);
    let term = ctd.ctr_pty(&args, 24, 80).unwrap();
    term.wait_output("ready", LONG).unwrap();
    term.send(b"typed\n").unwrap();
    let out = term.wait_output("got:", LONG).unwrap();
    assert!(out.contains("got:typed"), "{out:?}");
    ctd.task_kill("in", "SIGKILL", false).unwrap();
    let (status, out) = term.wait(LONG).unwrap();
    assert_eq!(status.code(), Some(137), "{out:?}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A feeder that writes `data`, then keeps stdin open until task `id` has more than `base`
/// processes (the exec started, so ctr's CloseIO hook is armed), then closes it.
fn feed_then_close_once_exec_runs(
    ctd: &Containerd,
    id: &str,
    base: usize,
    data: Vec<u8>,
) -> Feeder {
    let mut probe = ctd.ctr_command(&ctd.namespace);
    probe.args(["task", "ps", id]);
    let (prog, args): (_, Vec<_>) = (
        probe.get_program().to_owned(),
        probe.get_args().map(|a| a.to_owned()).collect(),
    );
    Box::new(move |mut stdin| {
        use std::io::Write;
        let _ = stdin.write_all(&data);
        let deadline = Instant::now() + GRACE;
        while Instant::now() < deadline {
            let out = Command::new(&prog).args(&args).output();
            let rows = out.map(|o| String::from_utf8_lossy(&o.stdout).lines().count());
            if rows.is_ok_and(|n| n > base + 1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

#[test]
fn close_io_ends_cat() {
    let Some(ctd) = start("close_io_ends_cat") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let input: String = (0..4000).map(|i| format!("line {i}\n")).collect();
    let out = ctd
        .run_stdin("cat", &rootfs, &["cat"], &rt(), input.as_bytes())
        .unwrap();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout == input,
        "cat's output differs ({} bytes)",
        out.stdout.len()
    );

    // CloseIO of an exec's stdin.
    sleeper(&ctd, "c");
    let base = ctd.task_ps("c").unwrap().len();
    let mut exec = ctd.ctr_command(&ctd.namespace);
    exec.args(["task", "exec", "--exec-id", "cat", "c", "cat"]);
    let feeder = feed_then_close_once_exec_runs(&ctd, "c", base, b"to the exec\n".to_vec());
    let out = run_fed(exec, Some(feeder), DEFAULT_TIMEOUT).unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "to the exec\n"),
        "{out:?}"
    );
    finish(&ctd, "c", &before);
}

#[test]
fn pause_and_resume_use_the_freezer() {
    let Some(ctd) = start("pause_and_resume_use_the_freezer") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let events = ctd.watch_events().unwrap();
    let tick = ctd.busybox_rootfs().unwrap().join("tmp/tick");
    let script = "i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.1; done";
    run_bg(&ctd, "p", &["sh", "-c", script], &[]);
    let changes = |what: &str| {
        let first = std::fs::read_to_string(&tick).unwrap_or_default();
        poll(what, GRACE, || {
            let now = std::fs::read_to_string(&tick).unwrap_or_default();
            (now != first && !now.is_empty()).then_some(())
        })
    };
    changes("the counter to run");
    assert_eq!(freezer_state(&ctd, "p"), "THAWED");

    ctd.task_pause("p").unwrap();
    assert_eq!(ctd.task_status("p").unwrap().as_deref(), Some("PAUSED"));
    assert_eq!(freezer_state(&ctd, "p"), "FROZEN");
    events.wait_topic("p", "/tasks/paused", GRACE).unwrap();
    let frozen = std::fs::read_to_string(&tick).unwrap();
    // As runc: no exec into a paused container (it would be born frozen).
    let out = ctd
        .ctr(&["task", "exec", "--exec-id", "late", "p", "true"])
        .unwrap();
    assert!(
        !out.success() && out.stderr.contains("paused"),
        "exec while paused: {out:?}"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        std::fs::read_to_string(&tick).unwrap(),
        frozen,
        "counter moved while paused"
    );

    ctd.task_resume("p").unwrap();
    assert_eq!(ctd.task_status("p").unwrap().as_deref(), Some("RUNNING"));
    assert_eq!(freezer_state(&ctd, "p"), "THAWED");
    events.wait_topic("p", "/tasks/resumed", GRACE).unwrap();
    changes("the counter to run again after resume");
    let topics = events.topics_for("p");
    let pos = |t: &str| topics.iter().position(|x| x == t);
    assert!(pos("/tasks/paused") < pos("/tasks/resumed"), "{topics:?}");
    finish(&ctd, "p", &before);
}

/// A number at `path` (e.g. `/memory/usage/usage`) of `ctr task metrics --format json`.
fn metric(m: &serde_json::Value, path: &str) -> u64 {
    m.pointer(path)
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("no number at {path} in {m}"))
}

#[test]
fn stats_are_real_cgroup_numbers() {
    let Some(ctd) = start("stats_are_real_cgroup_numbers") else {
        return;
    };
    // containerd's v1 and v2 Metrics name the same numbers differently.
    let v1 = Path::new("/sys/fs/cgroup/memory").is_dir();
    let (cpu_used, mem_used, mem_limit) = if v1 {
        (
            "/cpu/usage/total",
            "/memory/usage/usage",
            "/memory/usage/limit",
        )
    } else {
        ("/cpu/usage_usec", "/memory/usage", "/memory/usage_limit")
    };
    let before = LeakSnapshot::take(&ctd);
    let limit = 134_217_728u64;
    let busy = ["sh", "-c", "while :; do :; done"];
    run_bg(&ctd, "busy", &busy, &["--memory-limit", &limit.to_string()]);
    let m = poll("cpu usage > 0", GRACE, || {
        let m = ctd.task_metrics("busy").unwrap();
        // A zero is left out of the JSON: not yet a number to insist on.
        let used = m.pointer(cpu_used).and_then(|v| v.as_u64());
        (used.unwrap_or(0) > 0).then_some(m)
    });
    assert!(metric(&m, mem_used) > 0, "{m}");
    assert_eq!(metric(&m, mem_limit), limit, "{m}");
    let pids = metric(&m, "/pids/current");
    assert!(pids >= 1, "{m}");
    // The same numbers the cgroup shows (the busy loop forks nothing).
    let host_pids = read_trim(&cg_file(
        &ctd,
        "busy",
        "pids",
        "pids.current",
        "pids.current",
    ));
    assert_eq!(pids.to_string(), host_pids, "{m}");
    finish(&ctd, "busy", &before);
}

#[test]
fn update_changes_resources_live_and_rejects_bad_values() {
    let Some(ctd) = start("update_changes_resources_live_and_rejects_bad_values") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    sleeper(&ctd, "u");
    let mem = cg_file(&ctd, "u", "memory", "memory.limit_in_bytes", "memory.max");
    let pids = cg_file(&ctd, "u", "pids", "pids.max", "pids.max");
    let update = |res: serde_json::Value| ctd.task_update("u", &res).unwrap();

    update(serde_json::json!({"memory": {"limit": 67108864}})).unwrap();
    assert_eq!(read_trim(&mem), "67108864");
    update(serde_json::json!({"pids": {"limit": 77}})).unwrap();
    assert_eq!(read_trim(&pids), "77");
    update(serde_json::json!({"cpu": {"shares": 512, "quota": 50000, "period": 100000}})).unwrap();
    if Path::new("/sys/fs/cgroup/cpu").is_dir() {
        let cpu = |f| read_trim(&cg_file(&ctd, "u", "cpu", f, f));
        assert_eq!(
            (
                cpu("cpu.shares"),
                cpu("cpu.cfs_quota_us"),
                cpu("cpu.cfs_period_us")
            ),
            ("512".into(), "50000".into(), "100000".into())
        );
    } else {
        assert_eq!(
            read_trim(&cg_file(&ctd, "u", "cpu", "cpu.max", "cpu.max")),
            "50000 100000"
        );
    }

    // Bad values: a clear error, and the limits in force stay as they were. v1's kernel refuses
    // a limit below usage; v2's takes it and OOM-kills, so there (as with runc) only a caller
    // that sets checkBeforeUpdate gets the refusal.
    let low = serde_json::json!({"memory": {"limit": 1, "checkBeforeUpdate": true}});
    let err = update(low).unwrap_err();
    assert!(
        err.message().to_lowercase().contains("memory"),
        "a memory limit below usage should fail naming memory: {err:?}"
    );
    assert_eq!(read_trim(&mem), "67108864");
    println!("memory limit 1 refused: {}", err.message());
    // The kernel's minimum CFS quota is 1 ms (a negative one would mean "unlimited" on v1).
    let err = update(serde_json::json!({"cpu": {"quota": 500, "period": 100000}})).unwrap_err();
    println!("cpu quota 500 refused: {}", err.message());
    let msg = err.message().to_lowercase();
    assert!(
        msg.contains("cpu") || msg.contains("quota"),
        "a cpu quota below the minimum should fail naming it: {err:?}"
    );
    let quota = cg_file(&ctd, "u", "cpu", "cpu.cfs_quota_us", "cpu.max");
    assert!(read_trim(&quota).starts_with("50000"), "quota changed");
    assert_eq!(ctd.task_status("u").unwrap().as_deref(), Some("RUNNING"));
    finish(&ctd, "u", &before);
}

#[test]
fn oom_is_published_before_exit() {
    let Some(ctd) = start("oom_is_published_before_exit") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let events = ctd.watch_events().unwrap();
    // dd's 128 MiB block buffer is filled from /dev/zero: far over the 32 MiB limit.
    let dd = ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=128M count=1"];
    ctd.run_spec(&spec(&ctd, "oom", &dd, &["--memory-limit", "33554432"]))
        .unwrap()
        .check()
        .unwrap();
    let exit = events.wait_topic("oom", "/tasks/exit", LONG).unwrap();
    assert_eq!(exit.body["exit_status"], 137, "{exit:?}");
    let topics = events.topics_for("oom");
    let oom = topics.iter().position(|t| t == "/tasks/oom");
    let exited = topics.iter().position(|t| t == "/tasks/exit");
    assert!(
        matches!((oom, exited), (Some(o), Some(x)) if o < x),
        "TaskOOM must come before TaskExit: {topics:?}"
    );
    // ctr task delete warns with the exit status it got from Delete.
    let out = ctd.task_delete("oom", false).unwrap().check().unwrap();
    assert!(out.stderr.contains("exit code 137"), "{out:?}");
    finish(&ctd, "oom", &before);
}

#[test]
fn checkpoint_is_unimplemented() {
    let Some(ctd) = start("checkpoint_is_unimplemented") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    sleeper(&ctd, "c");
    let out = ctd.ctr(&["task", "checkpoint", "c"]).unwrap();
    assert!(!out.success(), "{out:?}");
    println!("checkpoint refused: {}", out.stderr.trim());
    let err = out.stderr.to_lowercase();
    if rt() == RUND_RUNTIME && ctd.is_v2() {
        // ctr 2.x prints the description without the code's text; shim_direct checks the
        // code itself.
        assert!(
            err.contains("checkpoint") && err.contains("does not support"),
            "Checkpoint should be refused with the shim's message: {:?}",
            out.stderr
        );
    } else if rt() == RUND_RUNTIME {
        assert!(
            err.contains("checkpoint") && err.contains("not implemented"),
            "Checkpoint should answer UNIMPLEMENTED with a message: {:?}",
            out.stderr
        );
    }
    // ctr pauses around a checkpoint: the task must be running again.
    ctd.wait_for_status("c", "RUNNING", GRACE).unwrap();
    finish(&ctd, "c", &before);
}
