//! CRI conformance, pods of several containers and host-to-container mount propagation, for both
//! runtime handlers (runc the reference, rund with its default config):
//!
//! - three containers in one pod: ExecSync runs in each (its own rootfs), and each one's stdout
//!   and stderr reach its CRI log file (the pod's log_directory + the container's log_path, in
//!   the CRI log format containerd writes); also in a pod with `rund.io/userns: "pod"`;
//! - a HOST_TO_CONTAINER (rslave) volume: a mount the node makes under it after the container
//!   started appears inside; a PRIVATE volume of the same source does not get it.

use rund_tests::cri::api::MountPropagation;
use rund_tests::cri::{bind_mount, CriFixture, Handler, SharedDir};
use rund_tests::{per_handler, ContainerSpec, ContainerdOpts, PodSpec, BUSYBOX_IMAGE};

const SLEEPER: &[&str] = &["sleep", "100000"];

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    CriFixture::start(h, test, ContainerdOpts::new())
}

/// Checks one CRI log file: `<RFC3339Nano> <stream> F <line>` for both lines.
fn check_log(h: Handler, text: &str, name: &str) {
    for (stream, line) in [
        ("stdout", format!("out-of-{name}")),
        ("stderr", format!("err-of-{name}")),
    ] {
        let found = text.lines().any(|l| {
            let mut f = l.splitn(4, ' ');
            let ts = f.next().unwrap_or_default();
            ts.contains('T')
                && f.next() == Some(stream)
                && f.next() == Some("F")
                && f.next() == Some(line.as_str())
        });
        assert!(
            found,
            "{}: {stream} {line:?} in the log of {name}:\n{text}",
            h.name()
        );
    }
}

fn exec_and_logs_in_each(h: Handler, fx: &mut CriFixture, mut pod: PodSpec) {
    let logs = fx.scratch(&format!("logs-{}", pod.name));
    pod.log_directory = logs.display().to_string();
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let names = ["alpha", "beta", "gamma"];
    let mut ids = Vec::new();
    for name in names {
        let script = format!(
            "echo {name} > /tmp/who; echo out-of-{name}; echo err-of-{name} >&2; exec sleep 100000"
        );
        let mut c = ContainerSpec::new(name, BUSYBOX_IMAGE, &["sh", "-c", &script]);
        c.log_path = format!("{name}.log");
        ids.push(fx.run(&pod_id, &c, &pod).expect(name));
    }
    for (id, name) in ids.iter().zip(names) {
        if pod.annotations.contains_key("rund.io/userns") && h == Handler::Rund {
            let map = fx.sh_ok(id, "cat /proc/self/uid_map");
            let host_root = map.split_whitespace().nth(1);
            assert_ne!(host_root, Some("0"), "rund: {name} is remapped: {map}");
        }
        let who = fx.wait_until(id, "test -s /tmp/who && cat /tmp/who");
        assert_eq!(
            who.stdout.trim(),
            name,
            "{}: exec into {name}: {who:?}",
            h.name()
        );
        let r = fx.exec(
            id,
            &["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7"],
        );
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (7, "to-stdout\n", "to-stderr\n"),
            "{}: exec into {name}",
            h.name()
        );
        let log = logs.join(format!("{name}.log"));
        let text = fx.wait_file(&log, &format!("err-of-{name}"));
        let text = if text.contains(&format!("out-of-{name}")) {
            text
        } else {
            fx.wait_file(&log, &format!("out-of-{name}"))
        };
        check_log(h, &text, name);
        // Exec output is not the container's log.
        assert!(!text.contains("to-stdout"), "{}: {text}", h.name());
    }
}

fn multi_container_exec_and_logs(h: Handler) {
    let Some(mut fx) = start(h, "multi_container_exec_and_logs") else {
        return;
    };
    let pod = fx.pod_spec("multi");
    exec_and_logs_in_each(h, &mut fx, pod);
    fx.finish();
}

fn multi_container_exec_and_logs_userns_pod(h: Handler) {
    let Some(mut fx) = start(h, "multi_container_exec_and_logs_userns_pod") else {
        return;
    };
    let mut pod = fx.pod_spec("multiuserns");
    pod.annotations
        .insert("rund.io/userns".into(), "pod".into());
    exec_and_logs_in_each(h, &mut fx, pod);
    fx.finish();
}

fn host_to_container_propagation(h: Handler) {
    let Some(mut fx) = start(h, "host_to_container_propagation") else {
        return;
    };
    let vol = SharedDir::new(fx.scratch("rslave")).expect("shared volume source");
    std::fs::create_dir_all(vol.path.join("late")).unwrap();
    let pod = fx.pod_spec("rslave");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut slave = ContainerSpec::new("slave", BUSYBOX_IMAGE, SLEEPER);
    slave.mounts = vec![bind_mount(
        &vol.path,
        "/vol",
        false,
        MountPropagation::PropagationHostToContainer,
    )];
    let mut private = ContainerSpec::new("private", BUSYBOX_IMAGE, SLEEPER);
    private.mounts = vec![bind_mount(
        &vol.path,
        "/vol",
        false,
        MountPropagation::PropagationPrivate,
    )];
    let s = fx.run(&pod_id, &slave, &pod).expect("rslave container");
    let p = fx.run(&pod_id, &private, &pod).expect("private container");

    // Mounted by the node after both containers started.
    let late = vol.mount_tmpfs("late").expect("tmpfs on the node");
    std::fs::write(late.join("marker"), "from-node\n").unwrap();
    let r = fx.sh(&s, "cat /vol/late/marker");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "from-node\n"),
        "{}: the node's mount must reach a HOST_TO_CONTAINER volume: {r:?}",
        h.name()
    );
    let info = fx.sh_ok(&s, "cat /proc/self/mountinfo");
    let line = info
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/vol"))
        .unwrap_or_else(|| panic!("{}: /vol in\n{info}", h.name()));
    assert!(line.contains(" master:"), "{}: rslave: {line}", h.name());
    let r = fx.sh(&p, "cat /vol/late/marker");
    assert_ne!(r.code, 0, "{}: a PRIVATE volume got it: {r:?}", h.name());
    drop(vol);
    fx.finish();
}

per_handler!(
    multi_container_exec_and_logs,
    multi_container_exec_and_logs_userns_pod,
    host_to_container_propagation,
);
