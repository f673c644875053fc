//! Harness smoke tests against Debian's runc-v2 runtime: they prove the private containerd,
//! the busybox rootfs, the OCI image and the leak checker work, independently of rund.

use std::time::Duration;

use rund_tests::{assert_no_leaks_within, Containerd, ContainerdOpts, LeakSnapshot, RUNC_RUNTIME};

const GRACE: Duration = Duration::from_secs(10);

fn runc_containerd() -> Containerd {
    Containerd::start(ContainerdOpts::new().with_runc()).expect("start private containerd")
}

#[test]
fn runc_echo_hello() {
    let ctd = runc_containerd();
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let out = ctd
        .run("echo", &rootfs, &["echo", "hello"], RUNC_RUNTIME)
        .unwrap();
    assert!(out.success(), "ctr run failed: {out:?}");
    assert_eq!(out.stdout.trim_end(), "hello", "{out:?}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn runc_exit_code_and_stdin() {
    let ctd = runc_containerd();
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let out = ctd
        .run("exit7", &rootfs, &["sh", "-c", "exit 7"], RUNC_RUNTIME)
        .unwrap();
    assert_eq!(out.code(), 7, "{out:?}");
    let out = ctd
        .run_stdin("cat", &rootfs, &["wc", "-c"], RUNC_RUNTIME, b"12345")
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.trim(), "5", "{out:?}");
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn runc_image_detached_ps_kill() {
    let ctd = runc_containerd();
    let ns = ctd.namespace.clone();
    let image = ctd.import_busybox_image(&ns).unwrap();
    let before = LeakSnapshot::take(&ctd);

    let out = ctd
        .run_image(
            "img",
            image,
            &["sh", "-c", "echo from-image; id -u"],
            RUNC_RUNTIME,
        )
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "from-image\n0\n", "{out:?}");

    // Detached with the image's default command (sleep), then ps / kill / delete.
    let spec = rund_tests::RunSpec {
        id: "bg".into(),
        image: Some(image.into()),
        detach: true,
        ..rund_tests::RunSpec::new(RUNC_RUNTIME)
    };
    ctd.run_spec(&spec).unwrap().check().unwrap();
    ctd.wait_for_status("bg", "RUNNING", GRACE).unwrap();
    let pids = ctd.task_ps("bg").unwrap();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let during = LeakSnapshot::take(&ctd);
    assert!(
        before.diff(&during).is_some(),
        "a running container must show up in the leak snapshot"
    );
    ctd.task_kill("bg", "SIGKILL", false).unwrap();
    ctd.wait_for_status("bg", "STOPPED", GRACE).unwrap();
    ctd.task_delete("bg", false).unwrap().check().unwrap();
    ctd.container_delete("bg").unwrap().check().unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn runc_absent_without_with_runc() {
    // Without with_runc, runc is not on containerd's PATH: the runc shim cannot run anything.
    let ctd = Containerd::start(ContainerdOpts::new()).unwrap();
    let rootfs = ctd.busybox_rootfs().unwrap();
    let out = ctd.run("norunc", &rootfs, &["true"], RUNC_RUNTIME).unwrap();
    assert!(!out.success(), "runc must not be reachable: {out:?}");
    ctd.remove_container("norunc");
}
