//! The workload never runs beside an init that still holds its privileges:
//! the init drops them before the workload may exec. Run as root (the init
//! then starts with every capability and keeps only CAP_KILL). strace delays
//! the init's capset by 300 ms, so a workload that did not wait for the drop
//! would read the init's full set every time.

use std::process::Command;

/// The parent's CapEff, read by the workload as its first act.
const PROBE: &str = "grep '^CapEff' /proc/$PPID/status";

#[test]
fn the_workload_sees_an_init_that_already_dropped_its_privileges() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        rund_skip::skip("needs root");
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        rund_skip::skip("strace is not installed (deploy/install-deps.sh installs it)");
        return;
    }
    let init = env!("CARGO_BIN_EXE_rund-init");
    for i in 0..3 {
        let out = Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=capset"])
            .args(["-e", "inject=capset:delay_enter=300000", init])
            .args(["--", "/bin/sh", "sh", "-c", PROBE])
            .output()
            .expect("run rund-init under strace");
        assert!(out.status.success(), "run {i}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let eff = text.split_whitespace().nth(1).unwrap_or_default();
        let caps = u64::from_str_radix(eff, 16).unwrap_or_else(|_| panic!("{text}"));
        assert_eq!(caps & !(1 << 5), 0, "run {i}: the init held {caps:x}");
    }
}
