//! A process that was created and never started, then killed: it ends and says so, as with
//! runc-v2 (whose reaper sees `runc init` die). containerd's forced delete of a created task
//! (`ctr task rm -f`, a client's `Delete(WithProcessKill)`) is a Kill, then a Wait, then a
//! Delete: a Kill that reports no exit leaves the Wait, and the client, waiting for ever.
//!
//! Needs root and rund's binaries; skipped with a message otherwise (`RUND_REQUIRE_BINS=1` makes
//! missing binaries a failure).

use containerd_shim_protos::api::Status;
use containerd_shim_protos::topics::{
    TASK_CREATE_EVENT_TOPIC as CREATE, TASK_DELETE_EVENT_TOPIC as DELETE,
    TASK_EXEC_ADDED_EVENT_TOPIC as EXEC_ADDED, TASK_EXIT_EVENT_TOPIC as EXIT,
    TASK_START_EVENT_TOPIC as START,
};
use containerd_shim_protos::ttrpc::Code;
use rund_tests::shim::{
    ctx, exec_process, exec_request, settle, status_of, topics, unique_id, Bundle, Direct,
    TaskEvent,
};

const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

async fn direct(test: &str) -> Option<Direct> {
    let bins = rund_tests::shim::direct_setup(test)?;
    let bundle = Bundle::new(&unique_id("unstarted")).unwrap();
    let spec = bundle.spec(rund_tests::shim::busybox_rootfs(), &["sleep", "30"]);
    bundle.write_config(&spec).unwrap();
    Some(Direct::start(&bins, bundle).await.unwrap())
}

/// The init: Create, Kill (SIGKILL), then Wait gives 137, Exit is published (with no Start
/// before it), and Delete leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_init_that_is_killed_exits_137() {
    let Some(d) = direct("a_created_init_that_is_killed_exits_137").await else {
        return;
    };
    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.kill_process("", libc::SIGKILL as u32).await.unwrap();
    let waited = d
        .wait_process("")
        .await
        .unwrap_or_else(|e| panic!("Wait after killing a created init: {e:?}"));
    assert_eq!(waited.exit_status, 137, "{}", d.diagnostics());
    assert_eq!(d.delete_process("").await.unwrap().exit_status, 137);
    let evs = d.events_until(DELETE).await.unwrap();
    assert_eq!(topics(&evs), [CREATE, EXIT, DELETE], "{evs:#?}");
    match &evs[1].event {
        TaskEvent::Exit(e) => assert_eq!((e.pid, e.exit_status), (created.pid, 137)),
        other => panic!("not a TaskExit: {other:?}"),
    }
    let r = settle(d.shim.pid, &d.bundle.path, &d.bundle.cgroups_path, SETTLE);
    assert!(r.is_empty(), "after Delete: {r}");
    let ended = d.finish().await;
    assert!(ended.by_itself, "Shutdown after the last Delete: {ended:?}");
}

/// An exec: Exec, Kill, Wait gives 137 with one Exit for it, and the init runs on. A Start
/// after the Kill is refused, and publishes no second Exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_exec_that_is_killed_exits_137() {
    let Some(d) = direct("a_created_exec_that_is_killed_exits_137").await else {
        return;
    };
    d.create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.start_process("").await.unwrap();
    let id = d.bundle.id.clone();
    let req = exec_request(&id, "e1", &exec_process(&["sleep", "30"]));
    d.shim.task.exec(ctx(), &req).await.unwrap();
    d.kill_process("e1", libc::SIGKILL as u32).await.unwrap();
    let waited = d
        .wait_process("e1")
        .await
        .unwrap_or_else(|e| panic!("Wait after killing a created exec: {e:?}"));
    assert_eq!(waited.exit_status, 137, "{}", d.diagnostics());
    let refused = d
        .start_process("e1")
        .await
        .expect_err("Start after the exit");
    assert_eq!(
        status_of(&refused).map(|s| s.0),
        Some(Code::FAILED_PRECONDITION),
        "{refused:?}"
    );
    assert_eq!(d.delete_process("e1").await.unwrap().exit_status, 137);
    let init = d.state("").await.unwrap();
    assert_eq!(
        init.status.enum_value(),
        Ok(Status::RUNNING),
        "the init runs on"
    );
    d.kill_process("", libc::SIGKILL as u32).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    let evs = d.events_until(DELETE).await.unwrap();
    assert_eq!(
        topics(&evs),
        [CREATE, START, EXEC_ADDED, EXIT, EXIT, DELETE],
        "{evs:#?}"
    );
    match &evs[3].event {
        TaskEvent::Exit(e) => assert_eq!((e.id.as_str(), e.exit_status), ("e1", 137)),
        other => panic!("not the exec's TaskExit: {other:?}"),
    }
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}
