use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

#[test]
fn the_key_names_binary_and_test() {
    assert_eq!(
        current_test_key(),
        "rund_skip::tests::the_key_names_binary_and_test"
    );
    assert_eq!(key::strip_hash("rund_ctr-0123456789abcdef"), "rund_ctr");
    assert_eq!(key::strip_hash("rund-bench"), "rund-bench");
    assert_eq!(key::strip_hash("x-0123456789abcdeg"), "x-0123456789abcdeg");
}

#[test]
fn lists_parse_and_refuse_bad_lines() {
    let ok = parse("# c\n\nbin::t1  why one\nbin::m::t2\twhy two\n").unwrap();
    assert_eq!(
        ok,
        [
            Entry {
                key: "bin::t1".into(),
                reason: "why one".into()
            },
            Entry {
                key: "bin::m::t2".into(),
                reason: "why two".into()
            }
        ]
    );
    let err = |t: &str| parse(t).unwrap_err().to_string();
    assert_eq!(err("bin::t\n"), "line 1: bin::t has no reason");
    assert!(err("\nnot_a_key why\n").starts_with("line 2: \"not_a_key\""));
    assert!(err("::t why\n").contains("is not `<binary>::<test>`"));
    assert_eq!(err("b::t x\nb::t y\n"), "line 2: b::t is listed twice");
}

#[test]
fn only_listed_skips_pass_when_everything_must_run() {
    let lax = Policy::new(false, "selftest", None);
    assert_eq!(lax.decide("any::thing"), Decision::Skip);

    let strict = Policy::new(true, "selftest", None);
    assert_eq!(
        strict.decide("rund_skip::tests::probe_listed"),
        Decision::Allowed {
            list: "tests/skip/src/selftest.txt",
            why: "the helper's test of an allow-listed skip".into()
        }
    );
    assert_eq!(
        strict.decide("rund_skip::tests::probe_unlisted"),
        Decision::Forbidden {
            list: "tests/skip/src/selftest.txt"
        }
    );
    // The runc list applies only when the suites run against another runtime.
    assert_eq!(strict.lists.len(), 1);
    assert_eq!(Policy::new(true, "host", Some(RUND_RUNTIME)).lists.len(), 1);
    let runc = Policy::new(true, "host", Some("io.containerd.runc.v2"));
    assert_eq!(runc.lists[1].0.path, RUNC_LIST.path);
}

#[test]
#[should_panic(expected = "RUND_SUITE=\"nope\": unknown suite")]
fn an_unknown_suite_is_refused() {
    Policy::new(true, "nope", None);
}

/// Every checked-in list parses, and each entry names a test that exists: a `fn <test>` in the
/// workspace's sources.
#[test]
fn checked_in_lists_name_real_tests() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut sources = String::new();
    for d in ["agent", "shim", "tests", "benches", "proto"] {
        read_rs(&ws.join(d), &mut sources);
    }
    for list in SUITES.iter().chain([&RUNC_LIST]) {
        for e in list.entries() {
            let name = e.key.rsplit("::").next().unwrap();
            assert!(
                sources.contains(&format!("fn {name}(")),
                "{}: {} names no test in the workspace",
                list.path,
                e.key
            );
        }
    }
}

fn read_rs(dir: &Path, out: &mut String) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p: PathBuf = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
            read_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
}

// The whole path, in a child process of this test binary: skip!'s output, its return, and its
// panic depend on the environment, which a test must not change in its own process.

const PROBE_ENV: &str = "RUND_SKIP_PROBE";

fn set_up(skip_it: bool) -> Option<u8> {
    if skip_it {
        crate::skip!("probe reason {}", 42);
    }
    Some(1)
}

/// Child entry points; without PROBE_ENV they only check the no-skip path.
#[test]
fn probe_listed() {
    let probing = std::env::var(PROBE_ENV).is_ok();
    println!("PROBE returned {:?}", set_up(probing));
}

#[test]
fn probe_unlisted() {
    probe_listed();
}

fn run_probe(test: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    for k in [REQUIRE_ENV, SUITE_ENV, RUNTIME_ENV] {
        c.env_remove(k);
    }
    c.env(PROBE_ENV, "1").envs(env.iter().copied());
    let out = c.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_skip_prints_and_returns_unless_everything_must_run() {
    let (ok, out) = run_probe("tests::probe_unlisted", &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("SKIP rund_skip::tests::probe_unlisted: probe reason 42\n"),
        "{out}"
    );
    assert!(out.contains("PROBE returned None"), "{out}");

    let strict = [(REQUIRE_ENV, "1"), (SUITE_ENV, "selftest")];
    let (ok, out) = run_probe("tests::probe_listed", &strict);
    assert!(ok, "{out}");
    assert!(
        out.contains("probe reason 42 (allowed by tests/skip/src/selftest.txt: the helper's"),
        "{out}"
    );
    assert!(out.contains("PROBE returned None"), "{out}");

    let (ok, out) = run_probe("tests::probe_unlisted", &strict);
    assert!(!ok, "{out}");
    assert!(
        out.contains("rund_skip::tests::probe_unlisted cannot run here: probe reason 42. RUND_REQUIRE_ALL=1 forbids"),
        "{out}"
    );
    assert!(!out.contains("PROBE returned"), "{out}");
}
