//! CRI conformance, volume mount semantics (rshared volumes and non-recursive read-only binds),
//! for both runtime handlers, runc the reference:
//!
//! - a BIDIRECTIONAL (rshared) volume of a privileged container: a mount the node makes under
//!   it appears inside, and a mount the container makes under it appears on the node;
//! - a read-only volume whose source has a tmpfs mounted inside it: the volume is read-only,
//!   the submount stays writable (runc's `ro` is not recursive);
//! - with `rro` (through ctr: containerd 1.6's CRI cannot ask for it) the submount is read-only
//!   too.

use rund_tests::cri::api::MountPropagation;
use rund_tests::cri::{bind_mount, CriFixture, Handler, SharedDir};
use rund_tests::{
    per_handler, ContainerSpec, ContainerdOpts, RunSpec, BUSYBOX_IMAGE, RUNC_RUNTIME, RUND_RUNTIME,
};

const SLEEPER: &[&str] = &["sleep", "100000"];

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    CriFixture::start(h, test, ContainerdOpts::new())
}

/// The mountinfo line of `target` in the container.
fn mountinfo_line(fx: &CriFixture, id: &str, target: &str) -> String {
    let info = fx.sh_ok(id, "cat /proc/self/mountinfo");
    info.lines()
        .find(|l| l.split_whitespace().nth(4) == Some(target))
        .unwrap_or_else(|| panic!("{}: {target} in\n{info}", fx.handler.name()))
        .to_owned()
}

fn rshared_bidirectional(h: Handler) {
    let Some(mut fx) = start(h, "rshared_bidirectional") else {
        return;
    };
    let vol = SharedDir::new(fx.scratch("rshared")).expect("shared volume source");
    std::fs::create_dir_all(vol.path.join("fromnode")).unwrap();
    std::fs::create_dir_all(vol.path.join("fromctr")).unwrap();
    let mut pod = fx.pod_spec("rshared");
    pod.privileged = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut c = ContainerSpec::new("bidi", BUSYBOX_IMAGE, SLEEPER);
    c.privileged = true;
    c.mounts = vec![bind_mount(
        &vol.path,
        "/vol",
        false,
        MountPropagation::PropagationBidirectional,
    )];
    let id = fx.run(&pod_id, &c, &pod).expect("BIDIRECTIONAL volume");
    let line = mountinfo_line(&fx, &id, "/vol");
    assert!(line.contains(" shared:"), "{}: rshared: {line}", h.name());

    let node = vol.mount_tmpfs("fromnode").expect("tmpfs on the node");
    std::fs::write(node.join("marker"), "from-node\n").unwrap();
    let r = fx.sh(&id, "cat /vol/fromnode/marker");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "from-node\n"),
        "{}: node to container: {r:?}",
        h.name()
    );
    fx.sh_ok(
        &id,
        "mount -t tmpfs tmpfs /vol/fromctr && echo from-ctr > /vol/fromctr/marker",
    );
    let back = std::fs::read_to_string(vol.path.join("fromctr/marker"));
    assert_eq!(
        back.ok().as_deref(),
        Some("from-ctr\n"),
        "{}: the container's mount must reach the node",
        h.name()
    );
    drop(vol);
    fx.finish();
}

fn readonly_volume_is_not_recursive(h: Handler) {
    let Some(mut fx) = start(h, "readonly_volume_is_not_recursive") else {
        return;
    };
    let vol = SharedDir::new(fx.scratch("ro")).expect("volume source");
    let sub = vol.mount_tmpfs("sub").expect("tmpfs inside the source");
    let pod = fx.pod_spec("rovol");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut c = ContainerSpec::new("ro", BUSYBOX_IMAGE, SLEEPER);
    c.mounts = vec![bind_mount(
        &vol.path,
        "/vol",
        true,
        MountPropagation::PropagationPrivate,
    )];
    let id = fx.run(&pod_id, &c, &pod).expect("read-only volume");
    let r = fx.sh(&id, "touch /vol/top");
    assert_ne!(r.code, 0, "{}: the volume is read-only: {r:?}", h.name());
    assert!(r.stderr.contains("Read-only"), "{}: {r:?}", h.name());
    let r = fx.sh(&id, "echo in-sub > /vol/sub/written");
    assert_eq!(
        r.code,
        0,
        "{}: the submount stays writable: {r:?}",
        h.name()
    );
    let seen = std::fs::read_to_string(sub.join("written"));
    assert_eq!(seen.ok().as_deref(), Some("in-sub\n"), "{}", h.name());
    drop(vol);
    fx.finish();
}

/// `ctr run` with a bind of `vol` at /vol with `options`; returns `touch /vol/sub/x`'s status
/// line from inside.
fn touch_in_sub(fx: &CriFixture, id: &str, vol: &std::path::Path, options: &str) -> String {
    let rootfs = fx.ctd.busybox_rootfs().expect("rootfs");
    let mount = format!("type=bind,src={},dst=/vol,options={options}", vol.display());
    let runtime = match fx.handler {
        Handler::Runc => RUNC_RUNTIME,
        Handler::Rund => RUND_RUNTIME,
    };
    let spec = RunSpec {
        id: id.into(),
        rootfs: Some(rootfs),
        flags: vec!["--mount".into(), mount],
        args: ["sh", "-c", "touch /vol/sub/x 2>&1; echo rc=$?"]
            .map(String::from)
            .to_vec(),
        ..RunSpec::new(runtime)
    };
    let out = fx.ctd.run_spec(&spec).expect("ctr run");
    assert_eq!(out.code(), 0, "{}: {out:?}", fx.handler.name());
    out.stdout
}

fn recursive_readonly_with_rro(h: Handler) {
    let Some(fx) = start(h, "recursive_readonly_with_rro") else {
        return;
    };
    let vol = SharedDir::new(fx.scratch("rro")).expect("volume source");
    vol.mount_tmpfs("sub").expect("tmpfs inside the source");
    let plain = touch_in_sub(&fx, "ro", &vol.path, "rbind:ro");
    assert!(plain.ends_with("rc=0\n"), "{}: ro: {plain}", h.name());
    let rec = touch_in_sub(&fx, "rro", &vol.path, "rbind:rro");
    assert!(
        rec.contains("Read-only") && rec.ends_with("rc=1\n"),
        "{}: rro: {rec}",
        h.name()
    );
    drop(vol);
    fx.finish();
}

per_handler!(
    rshared_bidirectional,
    readonly_volume_is_not_recursive,
    recursive_readonly_with_rro,
);
