//! rlimits and memlock through containerd and ctr: `process.rlimits` applied exactly (read back from
//! `/proc/self/limits` inside), and a memlock request above the hard limit in force fails with
//! one clear error that reaches ctr (or, with `[memlock] on_failure = "clamp-with-warning"`,
//! runs clamped and says so in the log).
//!
//! This machine has no CAP_SYS_RESOURCE and a hard RLIMIT_MEMLOCK of 8 MiB; where the limit CAN
//! be raised the tests say so and assert the positive case instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rund_tests::inside::{can_raise_limits, locked_memory, memlock_hard};
use rund_tests::ocispec::{set_annotation, set_rlimit, ConfigRun};
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, CmdOutput, Containerd, ContainerdOpts,
    LeakSnapshot, RUNC_RUNTIME,
};

const GRACE: Duration = Duration::from_secs(15);
/// Lets pods ask for any memlock (the default policy refuses raises).
const ALLOW_MEMLOCK: &str = "[policy]\nmax_memlock = \"unlimited\"\n";

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_under_test(test, ContainerdOpts::new())
}

fn fmt_limit(v: u64) -> String {
    if v == u64::MAX {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

fn write_config(ctd: &Containerd, name: &str, body: &str) -> PathBuf {
    let p = ctd.dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A foreground `ctr run --config` of `cat /proc/self/limits` with `edit` applied to the spec.
fn run_limits(
    ctd: &Containerd,
    rootfs: &Path,
    id: &str,
    config: Option<&Path>,
    edit: impl FnOnce(&mut serde_json::Value),
) -> CmdOutput {
    let mut spec = ctd
        .oci_spec(id, rootfs, &["cat", "/proc/self/limits"])
        .unwrap();
    edit(&mut spec);
    let opts = ConfigRun {
        runtime_config: config.map(Path::to_path_buf),
        ..ConfigRun::default()
    };
    ctd.run_config(id, &spec, &opts).unwrap()
}

/// The refused raise: fails, and the error names the request, the hard limit in force, the
/// missing capability and the fix.
fn assert_clear_memlock_error(out: &CmdOutput, requested: &str, hard: u64) {
    assert!(!out.success(), "must fail: {out:?}");
    let e = &out.stderr;
    eprintln!("ctr said: {e}");
    for needle in [
        "RLIMIT_MEMLOCK",
        requested,
        &fmt_limit(hard),
        "CAP_SYS_RESOURCE",
        "LimitMEMLOCK=infinity",
    ] {
        assert!(e.contains(needle), "ctr's error must name {needle:?}: {e}");
    }
}

#[test]
fn explicit_rlimits_are_applied_exactly() {
    let Some(ctd) = start("explicit_rlimits_are_applied_exactly") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    // Soft and hard differ, so both are checked; NOFILE comes from ctr's default spec.
    let out = run_limits(&ctd, &rootfs, "explicit", None, |s| {
        set_rlimit(s, "RLIMIT_MEMLOCK", 32768, 65536);
        set_rlimit(s, "RLIMIT_NOFILE", 1000, 1024);
    });
    assert!(out.success(), "{out:?}");
    assert_eq!(
        locked_memory(&out.stdout),
        ("32768".into(), "65536".into()),
        "{}",
        out.stdout
    );
    let nofile = out
        .stdout
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = nofile.split_whitespace().collect();
    assert_eq!((f[3], f[4]), ("1000", "1024"), "{nofile}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn memlock_above_the_hard_limit_fails_clearly() {
    let Some(ctd) = start("memlock_above_the_hard_limit_fails_clearly") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let hard = memlock_hard();
    if hard == u64::MAX {
        eprintln!("note: hard RLIMIT_MEMLOCK is unlimited here; nothing is above it");
    }
    let want = hard.saturating_mul(2).min(u64::MAX - 1);
    let before = LeakSnapshot::take(&ctd);

    let out = run_limits(&ctd, &rootfs, "above", None, |s| {
        set_rlimit(s, "RLIMIT_MEMLOCK", want, want)
    });
    if can_raise_limits() {
        eprintln!("note: CAP_SYS_RESOURCE present: asserting that the raise succeeds");
        assert!(out.success(), "{out:?}");
        assert_eq!(
            locked_memory(&out.stdout),
            (want.to_string(), want.to_string())
        );
    } else if runtime_under_test() != RUNC_RUNTIME {
        assert_clear_memlock_error(&out, &want.to_string(), hard);
    }
    let _ = ctd.container_delete("above");
    assert_no_leaks_within(&ctd, &before, GRACE);

    // The annotation asks for unlimited, which the node's policy allows here (rund_policy
    // covers the refusal): the same clear failure.
    if runtime_under_test() == RUNC_RUNTIME {
        rund_tests::skip!("the memlock annotation is rund's");
    }
    let allow = write_config(&ctd, "rund-allow.toml", ALLOW_MEMLOCK);
    let out = run_limits(&ctd, &rootfs, "ann", Some(&allow), |s| {
        set_annotation(s, "rund.io/memlock", "unlimited")
    });
    if can_raise_limits() {
        assert!(out.success(), "{out:?}");
        assert_eq!(
            locked_memory(&out.stdout),
            ("unlimited".into(), "unlimited".into())
        );
    } else {
        assert_clear_memlock_error(&out, "unlimited", hard);
    }
    let _ = ctd.container_delete("ann");

    // A malformed annotation is bad input, named.
    let out = run_limits(&ctd, &rootfs, "badann", None, |s| {
        set_annotation(s, "rund.io/memlock", "lots")
    });
    assert!(!out.success(), "{out:?}");
    assert!(
        out.stderr.contains("rund.io/memlock") && out.stderr.contains("lots"),
        "{}",
        out.stderr
    );
    let _ = ctd.container_delete("badann");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn clamp_with_warning_runs_at_the_hard_limit() {
    let Some(ctd) = start("clamp_with_warning_runs_at_the_hard_limit") else {
        return;
    };
    if runtime_under_test() == RUNC_RUNTIME {
        rund_tests::skip!("rund config only");
    }
    let rootfs = ctd.busybox_rootfs().unwrap();
    let hard = memlock_hard();
    let cfg = write_config(
        &ctd,
        "rund-clamp.toml",
        &format!("[memlock]\non_failure = \"clamp-with-warning\"\n{ALLOW_MEMLOCK}"),
    );
    let before = LeakSnapshot::take(&ctd);
    let out = run_limits(&ctd, &rootfs, "clamp", Some(&cfg), |s| {
        set_annotation(s, "rund.io/memlock", "unlimited")
    });
    assert!(
        out.success(),
        "clamping must let the container run: {out:?}"
    );
    if can_raise_limits() {
        eprintln!("note: CAP_SYS_RESOURCE present: nothing to clamp");
        assert_eq!(
            locked_memory(&out.stdout),
            ("unlimited".into(), "unlimited".into())
        );
    } else {
        let h = fmt_limit(hard);
        assert_eq!(locked_memory(&out.stdout), (h.clone(), h), "{}", out.stdout);
        let log = std::fs::read_to_string(&ctd.log).unwrap();
        assert!(
            log.contains("memlock clamped"),
            "the clamp is reported in the log, not silent"
        );
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}
