//! The shim binary driven directly, without containerd: a Task client on its socket and a fake
//! events endpoint as `TTRPC_ADDRESS`. Bad bundles, event order, exec, the `delete` action,
//! Checkpoint, Connect and Shutdown.
//!
//! Needs root and rund's binaries (`cargo build -p rund-shim -p rund-agent`); skipped with a
//! message otherwise (`RUND_REQUIRE_BINS=1` makes missing binaries a failure).

use std::path::Path;

use containerd_shim_protos::api::{
    CheckpointTaskRequest, ConnectRequest, DeleteResponse, KillRequest, Status,
};
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::topics::{
    TASK_CREATE_EVENT_TOPIC as CREATE, TASK_DELETE_EVENT_TOPIC as DELETE,
    TASK_EXEC_ADDED_EVENT_TOPIC as EXEC_ADDED, TASK_EXEC_STARTED_EVENT_TOPIC as EXEC_STARTED,
    TASK_EXIT_EVENT_TOPIC as EXIT, TASK_START_EVENT_TOPIC as START,
};
use containerd_shim_protos::ttrpc::Code;
use rund_tests::shim::{
    ctx, exec_process, exec_request, run_action, run_action_env, settle, status_of, topics,
    unique_id, Bundle, Direct, TaskEvent, NAMESPACE, USERNS_ALWAYS, USERNS_OFF,
};
use rund_tests::RundBins;
use serde_json::{json, Value};

const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

fn setup(test: &str) -> Option<RundBins> {
    rund_tests::shim::direct_setup(test)
}

fn rootfs() -> &'static Path {
    rund_tests::shim::busybox_rootfs()
}

/// Starts a shim for a bundle whose config.json is `config` (raw text).
async fn direct_with(bins: &RundBins, prefix: &str, config: &str) -> Direct {
    let bundle = Bundle::new(&unique_id(prefix)).unwrap();
    bundle.write_config_raw(config).unwrap();
    Direct::start(bins, bundle).await.unwrap()
}

/// Starts a shim for a busybox container running `args`, with `edit` applied to the spec.
async fn direct_spec(
    bins: &RundBins,
    prefix: &str,
    args: &[&str],
    edit: impl FnOnce(&mut Value),
) -> Direct {
    direct_config(bins, prefix, args, edit, "").await
}

/// Like [`direct_spec`], with `extra_config` appended to the shim's rund config.
async fn direct_config(
    bins: &RundBins,
    prefix: &str,
    args: &[&str],
    edit: impl FnOnce(&mut Value),
    extra_config: &str,
) -> Direct {
    let bundle = Bundle::new(&unique_id(prefix)).unwrap();
    let mut spec = bundle.spec(rootfs(), args);
    edit(&mut spec);
    bundle.write_config(&spec).unwrap();
    Direct::start_with(bins, bundle, extra_config)
        .await
        .unwrap()
}

/// Create must fail with `code` and a message containing every one of `needles`; then nothing
/// of the container may remain, no event may name it, and the idle shim exits on Shutdown.
async fn assert_create_refused(d: Direct, code: Code, needles: &[&str]) {
    let err = d
        .create()
        .await
        .expect_err("Create of a bad bundle must fail");
    let (got, msg) = status_of(&err).unwrap_or_else(|| panic!("not a status: {err:?}"));
    assert_eq!(got, code, "code of {msg:?}\n{}", d.diagnostics());
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not say {n:?}");
    }
    for cg in [
        d.bundle.cgroups_path.clone(),
        format!("/rund/{}", d.bundle.id),
    ] {
        let r = settle(d.shim.pid, &d.bundle.path, &cg, SETTLE);
        assert!(r.is_empty(), "after a refused Create ({msg}): {r}");
    }
    let evs = d.events.for_container(&d.bundle.id);
    assert!(evs.is_empty(), "events for a refused container: {evs:?}");
    let ended = d.finish().await;
    assert!(
        ended.by_itself,
        "an idle shim must exit on Shutdown: {ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_config_json_is_invalid_argument_and_leaves_nothing() {
    let Some(bins) = setup("malformed_config_json") else {
        return;
    };
    let bundle = Bundle::new("probe").unwrap();
    let mut args_string = bundle.spec(rootfs(), &["true"]);
    args_string["process"]["args"] = json!("sh -c true");
    let mut uid_text = bundle.spec(rootfs(), &["true"]);
    uid_text["process"]["user"]["uid"] = json!("root");
    drop(bundle);
    let cases = [
        ("not json", "{not json".to_string()),
        ("args a string", args_string.to_string()),
        ("uid a string", uid_text.to_string()),
        ("a json array", "[1, 2, 3]".to_string()),
    ];
    for (label, text) in cases {
        eprintln!("case: {label}");
        let d = direct_with(&bins, "malformed", &text).await;
        assert_create_refused(d, Code::INVALID_ARGUMENT, &["config.json is malformed"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_spec_fields_are_named() {
    let Some(bins) = setup("unsupported_spec_fields") else {
        return;
    };
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 3] = [
        ("process.apparmorProfile", |s| {
            s["process"]["apparmorProfile"] = json!("x")
        }),
        ("linux.intelRdt", |s| {
            s["linux"]["intelRdt"] = json!({ "closID": "x" })
        }),
        ("process.selinuxLabel", |s| {
            s["process"]["selinuxLabel"] = json!("system_u:system_r:container_t:s0")
        }),
    ];
    for (field, edit) in cases {
        eprintln!("case: {field}");
        let d = direct_spec(&bins, "unsup", &["true"], edit).await;
        assert_create_refused(d, Code::INVALID_ARGUMENT, &[field, "not supported"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_annotations_are_named_and_leave_nothing() {
    let Some(bins) = setup("bad_annotations") else {
        return;
    };
    for (key, value) in [
        ("rund.io/init", "maybe"),
        ("rund.io/grace-period-seconds", "soon"),
        ("rund.io/grace-period-seconds", "-1"),
    ] {
        eprintln!("case: {key}={value}");
        let d = direct_spec(&bins, "ann", &["true"], |s| {
            s["annotations"] = json!({ key: value })
        })
        .await;
        assert_create_refused(d, Code::INVALID_ARGUMENT, &[key, value]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_binary_fails_cleanly() {
    let Some(bins) = setup("missing_binary") else {
        return;
    };
    let d = direct_spec(&bins, "nobin", &["/no/such/binary"], |_| {}).await;
    // The error may come at Create (rund resolves the binary early) or at Start; either way
    // it names the binary and, once deleted, nothing remains.
    let named = |msg: &str| msg.contains("/no/such/binary");
    match d.create().await {
        Err(e) => {
            let (_, msg) = status_of(&e).expect("a status");
            assert!(named(&msg), "{msg:?}\n{}", d.diagnostics());
        }
        Ok(_) => {
            let err = d
                .start_process("")
                .await
                .expect_err("Start of a missing binary");
            let (_, msg) = status_of(&err).expect("a status");
            assert!(named(&msg), "{msg:?}\n{}", d.diagnostics());
            d.delete_process("")
                .await
                .expect("Delete after a failed Start");
        }
    }
    let r = settle(d.shim.pid, &d.bundle.path, &d.bundle.cgroups_path, SETTLE);
    assert!(r.is_empty(), "{r}\n{}", d.diagnostics());
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}

/// Create, Start, Wait, Delete of `args`: exit statuses, exactly Create, Start, Exit, Delete
/// events, nothing left, and the shim exits on Shutdown.
async fn lifecycle(bins: &RundBins, args: &[&str], want_status: u32) {
    let d = direct_spec(bins, "order", args, |_| {}).await;
    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    assert!(created.pid > 0);
    let started = d.start_process("").await.unwrap();
    assert_eq!(started.pid, created.pid);
    let waited = d.wait_process("").await.unwrap();
    assert_eq!(waited.exit_status, want_status, "{}", d.diagnostics());
    let deleted = d.delete_process("").await.unwrap();
    assert_eq!(deleted.exit_status, want_status);
    let evs = d.events_until(DELETE).await.unwrap();
    assert_eq!(
        topics(&evs),
        [CREATE, START, EXIT, DELETE],
        "event order of {args:?}: {evs:#?}"
    );
    for r in &evs {
        assert_eq!(r.namespace, NAMESPACE);
    }
    match &evs[2].event {
        TaskEvent::Exit(e) => {
            assert_eq!(e.exit_status, want_status);
            assert_eq!((e.id.as_str(), e.pid), (d.bundle.id.as_str(), created.pid));
        }
        other => panic!("not a TaskExit: {other:?}"),
    }
    match &evs[3].event {
        TaskEvent::Delete(e) => assert_eq!(e.exit_status, want_status),
        other => panic!("not a TaskDelete: {other:?}"),
    }
    let r = settle(d.shim.pid, &d.bundle.path, &d.bundle.cgroups_path, SETTLE);
    assert!(r.is_empty(), "after Delete: {r}");
    let ended = d.finish().await;
    assert!(ended.by_itself, "Shutdown after the last Delete: {ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_create_start_exit_delete_in_order() {
    let Some(bins) = setup("events_in_order") else {
        return;
    };
    lifecycle(&bins, &["sh", "-c", "exit 3"], 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_never_before_start_20_times() {
    let Some(bins) = setup("exit_never_before_start") else {
        return;
    };
    for i in 0..20 {
        eprintln!("round {i}");
        lifecycle(&bins, &["true"], 0).await;
    }
}

/// Every sandbox in its own user namespace (`mode = "always"`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_events_and_errors() {
    let Some(bins) = setup("exec") else {
        return;
    };
    exec_flow(&bins, USERNS_ALWAYS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_events_and_errors_without_userns() {
    let Some(bins) = setup("exec_without_userns") else {
        return;
    };
    exec_flow(&bins, USERNS_OFF).await;
}

/// Exec into a `sleep 30`: exit code, events, duplicate and unknown exec ids, exec after the
/// init exited.
async fn exec_flow(bins: &RundBins, extra_config: &str) {
    let d = direct_config(bins, "exec", &["sleep", "30"], |_| {}, extra_config).await;
    d.create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.start_process("").await.unwrap();
    let id = d.bundle.id.clone();
    let req = exec_request(&id, "e1", &exec_process(&["sh", "-c", "exit 4"]));
    d.shim
        .task
        .exec(ctx(), &req)
        .await
        .unwrap_or_else(|e| panic!("Exec: {e:?}\n{}", d.diagnostics()));
    let again = d
        .shim
        .task
        .exec(ctx(), &req)
        .await
        .expect_err("same exec id twice");
    assert_eq!(status_of(&again).map(|s| s.0), Some(Code::ALREADY_EXISTS));
    let started = d.start_process("e1").await.unwrap();
    assert!(started.pid > 0);
    assert_eq!(d.wait_process("e1").await.unwrap().exit_status, 4);
    let evs = d.events_until(EXIT).await.unwrap();
    assert_eq!(
        topics(&evs),
        [CREATE, START, EXEC_ADDED, EXEC_STARTED, EXIT]
    );
    match (&evs[2].event, &evs[3].event, &evs[4].event) {
        (TaskEvent::ExecAdded(a), TaskEvent::ExecStarted(s), TaskEvent::Exit(x)) => {
            assert_eq!((a.exec_id.as_str(), s.exec_id.as_str()), ("e1", "e1"));
            assert_eq!(s.pid, started.pid);
            assert_eq!(
                (x.id.as_str(), x.exit_status, x.pid),
                ("e1", 4, started.pid)
            );
        }
        other => panic!("unexpected events {other:?}"),
    }
    assert_eq!(d.delete_process("e1").await.unwrap().exit_status, 4);

    let unknown = KillRequest {
        id: id.clone(),
        exec_id: "nope".into(),
        signal: 15,
        ..Default::default()
    };
    let err = d
        .shim
        .task
        .kill(ctx(), &unknown)
        .await
        .expect_err("kill of an unknown exec");
    let (code, msg) = status_of(&err).expect("a status");
    assert_eq!(code, Code::NOT_FOUND, "{msg}");
    assert!(msg.contains("nope"), "{msg:?}");

    d.kill_process("", 9).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    // The init has exited: an exec is refused, clearly.
    let late = exec_request(&id, "e2", &exec_process(&["true"]));
    let err = d
        .shim
        .task
        .exec(ctx(), &late)
        .await
        .expect_err("exec into an exited container");
    let (code, msg) = status_of(&err).expect("a status");
    assert_eq!(code, Code::FAILED_PRECONDITION, "{msg}");
    assert!(msg.contains("not running") && msg.contains(&id), "{msg:?}");
    d.delete_process("").await.unwrap();
    let evs = d.events_until(DELETE).await.unwrap();
    assert_eq!(
        topics(&evs),
        [CREATE, START, EXEC_ADDED, EXEC_STARTED, EXIT, EXIT, DELETE],
        "{evs:#?}"
    );
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_action_is_idempotent() {
    let Some(bins) = setup("delete_action") else {
        return;
    };
    let bundle = Bundle::new(&unique_id("del")).unwrap();
    bundle
        .write_config(&bundle.spec(rootfs(), &["true"]))
        .unwrap();
    for round in 0..2 {
        let out = run_action(&bins, &bundle, "delete").unwrap();
        assert_eq!(out.code(), 0, "round {round}: {}", out.stderr);
        let resp = DeleteResponse::parse_from_bytes(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "round {round}: stdout is no DeleteResponse ({e}): {:?}",
                out.stdout
            )
        });
        assert_eq!(resp.exit_status, 137, "round {round}");
        assert!(resp.exited_at.is_some(), "round {round}: no exited_at");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_action_after_a_shim_crash_cleans_up() {
    let Some(bins) = setup("delete_after_crash") else {
        return;
    };
    let mut d = direct_spec(&bins, "crash", &["sleep", "30"], |_| {}).await;
    d.create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.start_process("").await.unwrap();
    let agents = rund_tests::shim::residue::agents_of(d.shim.pid);
    assert_eq!(agents.len(), 1, "one sandbox agent: {agents:?}");
    // The shim dies without tearing anything down, as on an OOM kill.
    d.shim.crash().await;
    let out = run_action(&bins, &d.bundle, "delete").unwrap();
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let alive = rund_tests::shim::running;
    let deadline = std::time::Instant::now() + SETTLE;
    while agents.iter().any(|&a| alive(a)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !agents.iter().any(|&a| alive(a)),
        "delete left the agent {agents:?} running"
    );
    let r = settle(0, &d.bundle.path, &d.bundle.cgroups_path, SETTLE);
    assert!(r.mounts.is_empty(), "delete left mounts: {r}");
    assert!(
        r.cgroups.is_empty(),
        "delete left the container's cgroup: {r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_is_unimplemented() {
    let Some(bins) = setup("checkpoint") else {
        return;
    };
    let d = direct_spec(&bins, "ckpt", &["true"], |_| {}).await;
    let req = CheckpointTaskRequest {
        id: d.bundle.id.clone(),
        path: "/tmp/nowhere".into(),
        ..Default::default()
    };
    let err = d
        .shim
        .task
        .checkpoint(ctx(), &req)
        .await
        .expect_err("Checkpoint");
    let (code, msg) = status_of(&err).expect("a status");
    assert_eq!(code, Code::UNIMPLEMENTED, "{msg}");
    assert!(msg.to_lowercase().contains("checkpoint"), "{msg:?}");
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_shutdown() {
    let Some(bins) = setup("connect_and_shutdown") else {
        return;
    };
    let mut d = direct_spec(&bins, "conn", &["sleep", "30"], |_| {}).await;
    let req = ConnectRequest {
        id: d.bundle.id.clone(),
        ..Default::default()
    };
    let c = d.shim.task.connect(ctx(), &req).await.unwrap();
    assert_eq!((c.shim_pid, c.task_pid), (d.shim.pid, 0));
    let created = d
        .create()
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    d.start_process("").await.unwrap();
    let c = d.shim.task.connect(ctx(), &req).await.unwrap();
    assert_eq!((c.shim_pid, c.task_pid), (d.shim.pid, created.pid));

    // Shutdown with a live container is a no-op: the shim keeps serving.
    let shutdown = containerd_shim_protos::api::ShutdownRequest {
        id: d.bundle.id.clone(),
        ..Default::default()
    };
    d.shim.task.shutdown(ctx(), &shutdown).await.unwrap();
    let st = d
        .state("")
        .await
        .expect("State after Shutdown with a live container");
    assert_eq!(st.status.enum_value(), Ok(Status::RUNNING));
    assert_eq!(st.pid, created.pid);
    assert!(d.shim.alive(), "the shim exited with a live container");

    d.kill_process("", 9).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    let socket = d.shim.socket.clone();
    let ended = d.finish().await;
    assert!(
        ended.by_itself,
        "Shutdown after Delete must end the shim: {ended:?}"
    );
    assert_eq!(ended.status.and_then(|s| s.code()), Some(0), "{ended:?}");
    assert!(
        !socket.exists(),
        "the shim left its socket {}",
        socket.display()
    );
}

#[test]
fn start_fails_clearly_when_its_server_cannot_run() {
    let Some(bins) = setup("start_fails_clearly_when_its_server_cannot_run") else {
        return;
    };
    let bundle = Bundle::new(&unique_id("startfail")).unwrap();
    bundle
        .write_config(&bundle.spec(rootfs(), &["true"]))
        .unwrap();
    // The forked server cannot reach containerd's events endpoint: it must say so through
    // `start`, and nothing may be left listening.
    let events = [("TTRPC_ADDRESS", "/nonexistent/containerd.sock.ttrpc")];
    let out = run_action_env(&bins, &bundle, "start", &events).unwrap();
    let stderr = &out.stderr;
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("shim server failed (exit status 1)")
            && stderr.contains("/nonexistent/containerd.sock.ttrpc"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no address is printed");
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&format!("-id {} ", bundle.id)))
        .collect();
    assert!(left.is_empty(), "no server is left: {left:?}");
}
