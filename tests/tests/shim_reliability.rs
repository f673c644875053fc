//! The shim's own hygiene, driven directly (no containerd): its socket is root's alone, a
//! normal lifecycle logs no warning, and running out of fds gives Create a clear error while
//! logging goes on (no fd is made per log line; nothing panics).
//!
//! Needs root and rund's binaries; skipped with a message otherwise.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use containerd_shim_protos::api::ConnectRequest;
use containerd_shim_protos::ttrpc::Code;
use rund_tests::faults::probe::{fd_count, nofile, set_soft_nofile};
use rund_tests::ocispec::is_alive;
use rund_tests::shim::{ctx, status_of, unique_id, Bundle, Direct};
use rund_tests::RundBins;

fn setup(test: &str) -> Option<RundBins> {
    rund_tests::shim::direct_setup(test)
}

fn rootfs() -> &'static Path {
    rund_tests::shim::busybox_rootfs()
}

async fn direct(bins: &RundBins, prefix: &str, args: &[&str]) -> Direct {
    let bundle = Bundle::new(&unique_id(prefix)).unwrap();
    bundle.write_config(&bundle.spec(rootfs(), args)).unwrap();
    Direct::start(bins, bundle).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_is_root_only() {
    let Some(bins) = setup("socket_is_root_only") else {
        return;
    };
    let d = direct(&bins, "sock", &["true"]).await;
    let mode = std::fs::metadata(&d.shim.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    assert!(d.finish().await.by_itself);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_lifecycle_logs_no_warning() {
    let Some(bins) = setup("a_normal_lifecycle_logs_no_warning") else {
        return;
    };
    let d = direct(&bins, "quiet", &["sleep", "100000"]).await;
    d.create().await.unwrap();
    d.start_process("").await.unwrap();
    assert_eq!(d.exec_to_end("e1", &["true"]).await.unwrap(), 0);
    d.kill_process("", libc::SIGKILL as u32).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    let log = d.bundle.log();
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
    let noisy: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains(" warn: "))
        .collect();
    assert!(
        noisy.is_empty(),
        "create, exec, kill, delete and shutdown are normal: {noisy:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_fds_create_fails_clearly_and_logging_goes_on() {
    let Some(bins) = setup("out_of_fds_create_fails_clearly") else {
        return;
    };
    let d = direct(&bins, "nofd", &["true"]).await;
    let pid = d.shim.pid;
    let (soft, _) = nofile(pid);
    // An answered call first: the shim has accepted our connection, so the limit below
    // cannot stop it from reading the Create (the connection would wait, unaccepted).
    let req = ConnectRequest {
        id: d.bundle.id.clone(),
        ..Default::default()
    };
    d.shim.task.connect(ctx(), &req).await.unwrap();
    // From not one fd left upwards: each Create fails naming the cause (and so would any
    // per-line dup of the log), until enough fds are left for it to work.
    let base = fd_count(pid).unwrap() as u64;
    let mut failures = 0;
    let mut created = false;
    for spare in 0..=64 {
        set_soft_nofile(pid, base + spare);
        let Err(err) = d.create().await else {
            eprintln!("Create worked with {spare} fds to spare");
            created = true;
            break;
        };
        failures += 1;
        let (code, msg) = status_of(&err).unwrap_or_else(|| {
            panic!("{spare} spare fds: an answer, not a transport error: {err:?}")
        });
        assert_ne!(code, Code::OK);
        assert!(
            msg.contains("Too many open files"),
            "{spare} spare fds: the error names the cause: {msg}"
        );
        assert!(is_alive(pid), "the shim survives");
    }
    set_soft_nofile(pid, soft);
    assert!(failures > 0, "Create worked without one fd to spare");
    assert!(
        d.bundle.log().contains("create failed"),
        "the failure was logged: {}",
        d.bundle.log()
    );
    // Nothing of the failed Creates is in the way.
    if !created {
        d.create()
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    }
    d.start_process("").await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 0);
    d.delete_process("").await.unwrap();
    assert!(d.finish().await.by_itself);
}
