use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::engine::report::ReportUnit;

/// A stand-in `rund`: saves its arguments to `args`, then runs `then`.
fn checker(dir: &std::path::Path, then: &str, secs: u64) -> HelperChecker {
    let p = dir.join("rund");
    let script = format!("#!/bin/sh\necho \"$@\" > {}/args\n{then}\n", dir.display());
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    HelperChecker {
        program: p,
        sysfs_root: dir.join("sys"),
        deadline: Duration::from_secs(secs),
    }
}

fn report() -> BwReport {
    BwReport {
        bytes: 65536,
        iterations: 5000,
        bw_peak: 11_000.5,
        bw_average: 10_500.25,
        msg_rate_mpps: 0.168004,
        unit: ReportUnit::MiB,
        elapsed_ns: 31_234_567,
        gid_index: Some(3),
    }
}

#[test]
fn the_gates_options_go_out_and_the_report_comes_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let reply = serde_json::to_string(&WriteBwReply::Measured(report())).unwrap();
    let c = checker(dir.path(), &format!("printf '%s' '{reply}'"), 30);
    let params = WriteBwParams {
        size: 4096,
        iters: 777,
        ib_port: 2,
        gid_index: Some(5),
        ..Default::default()
    };
    assert_eq!(c.measure("mlx5_1", &params).unwrap(), report());
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert_eq!(
        args.trim(),
        "helper write-bw --device mlx5_1 --size 4096 --iters 777 --ib-port 2 --gid-index 5"
    );
}

#[test]
fn a_failed_run_a_crash_and_a_hang_are_errors_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let reply =
        serde_json::to_string(&WriteBwReply::Failed("no RDMA devices found".into())).unwrap();
    let c = checker(dir.path(), &format!("printf '%s' '{reply}'"), 30);
    let e = c.measure("mlx5_0", &WriteBwParams::default()).unwrap_err();
    assert_eq!(e.to_string(), "no RDMA devices found");

    let c = checker(dir.path(), "echo 'cannot load libibverbs' >&2; exit 4", 30);
    let e = c
        .measure("mlx5_0", &WriteBwParams::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot load libibverbs") && e.contains('4'),
        "{e}"
    );

    let c = checker(dir.path(), "exec sleep 1000", 1);
    let e = c
        .measure("mlx5_0", &WriteBwParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no result in 1 s"), "{e}");
}

/// The real backend on this machine (no RDMA hardware) answers cleanly.
#[cfg(feature = "verbs")]
#[test]
fn serve_on_a_node_without_rdma_replies_failed() {
    let r: WriteBwReply =
        serde_json::from_slice(&serve("mlx5_0", &WriteBwParams::default())).unwrap();
    assert!(matches!(&r, WriteBwReply::Failed(_)), "{r:?}");
}
