//! rund through containerd and ctr: output, exit codes, stdin, kill, ps, delete,
//! 20 at once, and bad input. Neither runc nor crun is on containerd's PATH.
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use std::path::Path;
use std::time::Duration;

use rund_tests::{
    assert_no_leaks_within, runtime_under_test, Containerd, ContainerdOpts, LeakSnapshot, RunSpec,
    RUND_RUNTIME,
};

fn rt() -> String {
    runtime_under_test()
}

const GRACE: Duration = Duration::from_secs(15);
/// A bound on waits for a task's status, not a timing: a detached start under TCG on a
/// loaded machine took 20 s.
const WAIT: Duration = Duration::from_secs(60);

fn start(test: &str) -> Option<Containerd> {
    let ctd = Containerd::start_under_test(test, ContainerdOpts::new())?;
    if runtime_under_test() == RUND_RUNTIME {
        assert!(
            !ctd.path_dir.join("runc").exists() && !ctd.path_dir.join("crun").exists(),
            "runc/crun must not be on containerd's PATH"
        );
    }
    Some(ctd)
}

#[test]
fn run_with_output() {
    let Some(ctd) = start("run_with_output") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let out = ctd
        .run("hello", &rootfs, &["echo", "hello"], &rt())
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "hello\n");
    let out = ctd
        .run(
            "both",
            &rootfs,
            &["sh", "-c", "echo out; echo err >&2"],
            &rt(),
        )
        .unwrap();
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("out\n", "err\n"),
        "{out:?}"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `ctr run --rm` with the same id again at once: the new `start` must not find the last
/// shim on its way out (its socket is unlinked first), or the run fails with `ttrpc: closed`.
#[test]
fn same_id_again_at_once() {
    let Some(ctd) = start("same_id_again_at_once") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let spec = RunSpec {
        id: "again".into(),
        rootfs: Some(rootfs),
        args: vec!["echo".into(), "again".into()],
        ..RunSpec::new(&rt())
    };
    ctd.assert_runs_again(&spec, 20, "again\n");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn exit_codes() {
    let Some(ctd) = start("exit_codes") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    for code in [0, 1, 7, 255] {
        let script = format!("exit {code}");
        let out = ctd
            .run(
                &format!("exit{code}"),
                &rootfs,
                &["sh", "-c", &script],
                &rt(),
            )
            .unwrap();
        assert_eq!(out.code(), code, "{out:?}");
    }
    // Death by a signal: 128+N (a child of sh, since pid 1 ignores its own default signals).
    let out = ctd
        .run(
            "sig",
            &rootfs,
            &["sh", "-c", "sh -c 'kill -9 $$'; exit $?"],
            &rt(),
        )
        .unwrap();
    assert_eq!(out.code(), 137, "{out:?}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn stdin_is_forwarded() {
    let Some(ctd) = start("stdin_is_forwarded") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let input = b"line one\nline two\n";
    let out = ctd
        .run_stdin("cat", &rootfs, &["cat"], &rt(), input)
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.as_bytes(), input);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Run `args` in the foreground on a thread, kill it with `signal` once running, return its code.
fn killed_code(ctd: &Containerd, rootfs: &Path, id: &str, args: &[&str], signal: &str) -> i32 {
    std::thread::scope(|s| {
        let fg = s.spawn(|| ctd.run(id, rootfs, args, &rt()));
        ctd.wait_for_status(id, "RUNNING", WAIT).unwrap();
        ctd.task_kill(id, signal, false).unwrap();
        fg.join().unwrap().unwrap().code()
    })
}

#[test]
fn kill_term_and_kill() {
    let Some(ctd) = start("kill_term_and_kill") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let trap = ["sh", "-c", "trap 'exit 42' TERM; sleep 1000 & wait"];
    assert_eq!(killed_code(&ctd, &rootfs, "term", &trap, "SIGTERM"), 42);
    let sleeper = ["sleep", "1000"];
    assert_eq!(killed_code(&ctd, &rootfs, "kill", &sleeper, "SIGKILL"), 137);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn task_ps_and_delete() {
    let Some(ctd) = start("task_ps_and_delete") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let args = ["sh", "-c", "sleep 1000 & sleep 1000 & wait"];
    ctd.run_detached("ps", &rootfs, &args, &rt()).unwrap();
    ctd.wait_for_status("ps", "RUNNING", WAIT).unwrap();
    let init = ctd
        .task_list()
        .unwrap()
        .into_iter()
        .find(|t| t.id == "ps")
        .unwrap();
    // sh (the task pid, PID 1 of the container) and two sleeps, as with runc.
    let want = 3;
    let mut pids = Vec::new();
    for _ in 0..100 {
        pids = ctd.task_ps("ps").unwrap();
        if pids.len() == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(pids.len(), want, "{pids:?}");
    assert!(pids.contains(&init.pid), "{pids:?} lacks init {}", init.pid);

    // A running task cannot be deleted without --force.
    assert!(!ctd.task_delete("ps", false).unwrap().success());
    ctd.task_kill("ps", "SIGKILL", true).unwrap();
    ctd.wait_for_status("ps", "STOPPED", WAIT).unwrap();
    ctd.task_delete("ps", false).unwrap().check().unwrap();
    ctd.wait_for_status("ps", "absent", WAIT).unwrap();
    assert!(
        !ctd.task_delete("ps", false).unwrap().success(),
        "second delete"
    );
    ctd.container_delete("ps").unwrap().check().unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn twenty_at_once() {
    let Some(ctd) = start("twenty_at_once") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let outs: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..20)
            .map(|i| {
                let (ctd, rootfs) = (&ctd, &rootfs);
                s.spawn(move || {
                    let msg = format!("container {i}");
                    ctd.run(&format!("c{i}"), rootfs, &["echo", &msg], &rt())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    for (i, out) in outs.iter().enumerate() {
        assert!(out.success(), "c{i}: {out:?}");
        assert_eq!(out.stdout, format!("container {i}\n"));
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `ctr run` must fail, say something that contains `needle`, and leave nothing behind.
fn bad_input(ctd: &Containerd, spec: RunSpec, needle: &str) {
    let before = LeakSnapshot::take(ctd);
    let id = spec.id.clone();
    let out = ctd.run_spec(&spec).unwrap();
    assert!(!out.success(), "{id}: must fail: {out:?}");
    assert!(
        out.stderr.contains(needle),
        "{id}: error should mention {needle:?}: {:?}",
        out.stderr
    );
    let _ = ctd.container_delete(&id);
    assert_no_leaks_within(ctd, &before, GRACE);
}

#[test]
fn bad_inputs_fail_cleanly() {
    let Some(ctd) = start("bad_inputs_fail_cleanly") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    std::fs::write(rootfs.join("bin/noexec"), "#!/bin/sh\n").unwrap();
    let base = |id: &str, args: &[&str]| RunSpec {
        id: id.into(),
        rootfs: Some(rootfs.clone()),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..RunSpec::new(&rt())
    };
    let missing = ctd.dir.join("no-such-rootfs");
    bad_input(
        &ctd,
        RunSpec {
            rootfs: Some(missing.clone()),
            ..base("norootfs", &["true"])
        },
        "no-such-rootfs",
    );
    bad_input(
        &ctd,
        base("nobin", &["/bin/no-such-binary"]),
        "no-such-binary",
    );
    bad_input(&ctd, base("noexec", &["/bin/noexec"]), "noexec");
    // A missing cwd is made, as runc makes it (0755, owned by root), inside the rootfs.
    let out = ctd
        .run_spec(&RunSpec {
            flags: vec!["--cwd".into(), "/new/cwd".into()],
            ..base("newcwd", &["sh", "-c", "pwd; stat -c %a:%u /new/cwd"])
        })
        .unwrap();
    assert_eq!(out.stdout, "/new/cwd\n755:0\n", "{out:?}");
    assert!(rootfs.join("new/cwd").is_dir());
    let _ = ctd.container_delete("newcwd");
    bad_input(
        &ctd,
        RunSpec {
            flags: vec!["--with-ns".into(), "network:/proc/no-such-ns".into()],
            ..base("badns", &["true"])
        },
        "no-such-ns",
    );
}

/// The spec's seccomp filter and capability sets reach the workload.
#[test]
fn seccomp_and_capabilities_apply() {
    let Some(ctd) = start("seccomp_and_capabilities_apply") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let script = [
        "sh",
        "-c",
        "grep -E '^(Seccomp|CapEff|CapBnd):' /proc/self/status",
    ];
    let spec = |id: &str, flags: &[&str]| RunSpec {
        id: id.into(),
        rootfs: Some(rootfs.clone()),
        args: script.iter().map(|s| s.to_string()).collect(),
        flags: flags.iter().map(|s| s.to_string()).collect(),
        ..RunSpec::new(&rt())
    };
    let plain = ctd.run_spec(&spec("noseccomp", &[])).unwrap();
    assert!(plain.success(), "{plain:?}");
    assert!(plain.stdout.contains("Seccomp:\t0"), "{plain:?}");
    // containerd's default set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID
    // SETUID SETPCAP NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
    assert!(
        plain.stdout.contains("CapEff:\t00000000a80425fb"),
        "{plain:?}"
    );
    assert!(
        plain.stdout.contains("CapBnd:\t00000000a80425fb"),
        "{plain:?}"
    );
    let filtered = ctd.run_spec(&spec("seccomp", &["--seccomp"])).unwrap();
    assert!(filtered.success(), "{filtered:?}");
    assert!(
        filtered.stdout.contains("Seccomp:\t2"),
        "filter mode expected: {filtered:?}"
    );
    assert_no_leaks_within(&ctd, &before, GRACE);
}
