//! The client against a real private containerd (runc-v2 only: no rund
//! binaries needed).

use std::time::Duration;

use super::{Api, ApiError};
use crate::env::BenchEnv;
use crate::runtime::{Runtime, RuntimeKind};

#[test]
fn the_client_api_runs_removes_and_reports_a_failing_task_on_a_real_containerd() {
    if !nix::unistd::Uid::effective().is_root() {
        rund_tests::skip!("a private containerd needs root");
    }
    let t = Duration::from_secs(120);
    let env = BenchEnv::start(false, false, t).unwrap_or_else(|e| panic!("{e}"));
    let runc = Runtime::plain(RuntimeKind::Runc);
    let api = Api::connect(
        env.containerd.address(),
        &env.ctr,
        &env.rootfs,
        std::slice::from_ref(&runc),
        t,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let left = || env.ctr.containers().unwrap();
    assert!(
        left().is_empty(),
        "the template container stays: {:?}",
        left()
    );

    api.run_rm(&runc, "api-true", &["/bin/true"]).unwrap();
    assert!(left().is_empty(), "run --rm left {:?}", left());
    match api.run_rm(&runc, "api-false", &["/bin/false"]) {
        Err(ApiError::Exit { status: 1 }) => {}
        r => panic!("a task that exits 1 gave {r:?}"),
    }
    assert!(left().is_empty(), "a failed run --rm left {:?}", left());

    api.run_detached(&runc, "api-sleep", &["/bin/sleep", "1000"])
        .unwrap();
    let running = env.ctr.tasks().unwrap();
    assert!(
        running
            .iter()
            .any(|t| t.id == "api-sleep" && t.status == "RUNNING"),
        "{running:?}"
    );
    // ctr's container but for the argv and the cgroup path.
    let info: serde_json::Value =
        serde_json::from_str(&env.ctr.run(&["container", "info", "api-sleep"]).unwrap()).unwrap();
    assert_eq!(info["Runtime"]["Name"], "io.containerd.runc.v2");
    assert_eq!(
        info["Spec"]["process"]["args"],
        serde_json::json!(["/bin/sleep", "1000"])
    );
    assert_eq!(
        info["Spec"]["linux"]["cgroupsPath"],
        format!("/{}/api-sleep", env.containerd.namespace)
    );
    assert_eq!(
        info["Spec"]["root"]["path"],
        env.rootfs.display().to_string()
    );
    // The same id again is containerd's error, not a hang.
    match api.run_detached(&runc, "api-sleep", &["/bin/true"]) {
        Err(ApiError::Call { code, .. }) => assert_eq!(code, tonic::Code::AlreadyExists),
        r => panic!("a second container of one id gave {r:?}"),
    }
    api.remove("api-sleep").unwrap();
    assert!(left().is_empty(), "remove left {:?}", left());
    match api.remove("api-sleep") {
        Err(ApiError::Call { code, .. }) => assert_eq!(code, tonic::Code::NotFound),
        r => panic!("removing a gone container gave {r:?}"),
    }
    let rund = Runtime::plain(RuntimeKind::Rund);
    assert!(matches!(
        api.run_detached(&rund, "x", &["/bin/true"]),
        Err(ApiError::NoTemplate(_))
    ));
}
