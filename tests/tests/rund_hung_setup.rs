//! Set-up stuck on a hung volume (a FUSE mount that never answers a lookup, as a dead NFS
//! server): an exec whose cwd is on it hides nothing of its container meanwhile (Pids and
//! other execs work), and a Create whose request is dropped on its deadline leaves no process
//! behind in the pod's agent, even while the volume still hangs.

use std::path::Path;
use std::time::{Duration, Instant};

use containerd_shim_protos::api::{DeleteRequest, StartRequest, WaitRequest};
use containerd_shim_protos::ttrpc::context;
use rund_tests::hung::HungVolume;
use rund_tests::shim::residue::{agents_of, children_of, settle};
use rund_tests::shim::{ctx, unique_id, Bundle, Direct};
use rund_tests::{
    assert_no_leaks_within, rund_bins_or_skip, shared_busybox_rootfs, Containerd, ContainerdOpts,
    LeakSnapshot, RunSpec,
};
use serde_json::json;

const GRACE: Duration = Duration::from_secs(60);

fn fuse_available() -> bool {
    Path::new("/dev/fuse").exists()
}

#[test]
fn exec_stuck_in_setup_hides_nothing() {
    let test = "exec_stuck_in_setup_hides_nothing";
    if !fuse_available() {
        rund_tests::skip!("{test}: no /dev/fuse");
    }
    let Some(ctd) = Containerd::start_under_test(test, ContainerdOpts::new()) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    std::fs::create_dir_all(rootfs.join("hung")).unwrap();
    let before = LeakSnapshot::take(&ctd);
    let mut vol = HungVolume::mount(&ctd.dir.join("hung")).unwrap();
    let bind = format!(
        "type=bind,src={},dst=/hung,options=rbind:rw",
        vol.path.display()
    );
    let run = RunSpec {
        id: "c".into(),
        rootfs: Some(rootfs.clone()),
        args: vec!["sleep".into(), "100000".into()],
        flags: vec!["--mount".into(), bind],
        detach: true,
        ..RunSpec::new(&rund_tests::runtime_under_test())
    };
    ctd.run_spec(&run).unwrap().check().unwrap();
    let init_pids = ctd.task_ps("c").unwrap();

    let stuck = {
        let mut cmd = ctd.ctr_command(&ctd.namespace);
        cmd.args(["task", "exec", "--cwd", "/hung/stuck", "--exec-id", "stuck"])
            .args(["c", "true"]);
        std::thread::spawn(move || rund_tests::cmd::run(cmd, None, Duration::from_secs(300)))
    };
    assert!(
        vol.wait_lookup("stuck", GRACE),
        "the exec's set-up reaches the hung volume: {:?}",
        vol.requests()
    );
    // While that set-up hangs, the container answers.
    assert_eq!(ctd.task_status("c").unwrap().as_deref(), Some("RUNNING"));
    let pids = ctd.task_ps("c").expect("Pids during a stuck exec set-up");
    for p in &init_pids {
        assert!(pids.contains(p), "{pids:?} lacks the init {p}");
    }
    let out = ctd.task_exec("c", "other", &["echo", "hi"], None).unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "hi\n"),
        "another exec during a stuck set-up: {out:?}"
    );

    vol.release();
    let out = stuck.join().unwrap().unwrap();
    assert!(
        !out.success(),
        "the stuck exec fails once the volume is gone: {out:?}"
    );
    assert_eq!(ctd.task_status("c").unwrap().as_deref(), Some("RUNNING"));
    ctd.remove_container("c");
    ctd.wait_for_status("c", "absent", GRACE).unwrap();
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// Whether SIGKILL is pending for `pid` (process-wide or for its main thread).
fn kill_pending(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("ShdPnd:") || l.starts_with("SigPnd:"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .any(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

/// A pod sandbox's and a pod container's spec: CRI's annotations on the bundle's default spec.
fn pod_spec(
    bundle: &Bundle,
    rootfs: &Path,
    args: &[&str],
    sandbox_id: &str,
    kind: &str,
) -> serde_json::Value {
    let mut spec = bundle.spec(rootfs, args);
    spec["annotations"] = json!({
        "io.kubernetes.cri.container-type": kind,
        "io.kubernetes.cri.sandbox-id": sandbox_id,
    });
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_create_leaves_no_process_in_the_agent() {
    let test = "dropped_create_leaves_no_process_in_the_agent";
    if !nix::unistd::geteuid().is_root() || !fuse_available() {
        rund_tests::skip!("{test}: needs root and /dev/fuse");
    }
    let Some(bins) = rund_bins_or_skip(test) else {
        return;
    };
    if rund_tests::runtime_under_test() != rund_tests::RUND_RUNTIME {
        rund_tests::skip!("{test}: drives rund's shim directly");
    }
    let rootfs = {
        static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _once = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        shared_busybox_rootfs().expect("busybox rootfs")
    };
    std::fs::create_dir_all(rootfs.join("hung")).unwrap();
    let sandbox_id = unique_id("pod");
    let sb = Bundle::new(&sandbox_id).unwrap();
    sb.write_config(&pod_spec(&sb, rootfs, &["pause"], &sandbox_id, "sandbox"))
        .unwrap();
    let d = Direct::start(&bins, sb).await.unwrap();
    // Dropped before the shim: what is stuck on it must be freed before it can be reaped.
    let mut vol = HungVolume::mount(&d.bundle.scratch().join("hung")).unwrap();
    d.create().await.unwrap();
    d.start_process("").await.unwrap();
    let agent = agents_of(d.shim.pid)[0];

    // A container whose set-up blocks on the hung volume (its cwd), created with a short
    // deadline: the shim drops the request when it passes.
    let c = Bundle::new(&unique_id("stuck")).unwrap();
    let mut spec = pod_spec(&c, rootfs, &["true"], &sandbox_id, "container");
    spec["process"]["cwd"] = json!("/hung/stuck");
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/hung", "type": "bind",
        "source": vol.path.display().to_string(), "options": ["rbind", "rw"]
    }));
    c.write_config(&spec).unwrap();
    let mut req = rund_tests::shim::create_request(&c);
    req.id = c.id.clone();
    let short = context::with_timeout(Duration::from_secs(5).as_nanos() as i64);
    let err = d
        .shim
        .task
        .create(short, &req)
        .await
        .expect_err("Create stuck in set-up");
    assert!(
        vol.wait_lookup("stuck", Duration::from_secs(1)),
        "the set-up was stuck on the volume ({err:?}): {:?}",
        vol.requests()
    );
    // The agent's own deadline on CreateContainer (60 s) ends its request: what it forked
    // must be killed with it. A process waiting on a FUSE answer dies only once the volume
    // is gone, so while it hangs, SIGKILL pending is the proof.
    let deadline = Instant::now() + Duration::from_secs(120);
    let unkilled = || {
        children_of(agent)
            .into_iter()
            .filter(|(pid, _)| !kill_pending(*pid))
            .collect::<Vec<_>>()
    };
    while !unkilled().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        unkilled(),
        vec![],
        "the dropped Create's process must be killed"
    );
    vol.release();
    let deadline = Instant::now() + GRACE;
    while !children_of(agent).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(children_of(agent), vec![], "and gone with the volume");
    // The pod's shim may keep a gone container's cgroup for the pod's next container (v1
    // reuse inside a pod): what matters is that nothing runs in it any more.
    let deadline = Instant::now() + GRACE;
    // A dir gone since the report was renamed to its keep marker (which is
    // checked too) or removed: not busy.
    let busy = || {
        let r = settle(d.shim.pid, &c.path, &c.cgroups_path, Duration::ZERO);
        let markers = r.cgroups.iter().filter_map(|d| d.parent()).flat_map(|p| {
            std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".rund-pool~k-"))
                .map(|e| e.path())
        });
        let busy: Vec<_> = r
            .cgroups
            .iter()
            .cloned()
            .chain(markers)
            .filter(|d| match std::fs::read_to_string(d.join("cgroup.procs")) {
                Ok(p) => !p.is_empty(),
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            })
            .collect();
        (busy, r)
    };
    while !busy().0.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (still, r) = busy();
    assert!(still.is_empty() && r.mounts.is_empty(), "{still:?} {r}");
    let pod_parent = std::path::Path::new(&c.cgroups_path)
        .parent()
        .unwrap()
        .display()
        .to_string();

    // The pod goes on: a new container in it runs.
    let ok = Bundle::new(&unique_id("next")).unwrap();
    ok.write_config(&pod_spec(&ok, rootfs, &["true"], &sandbox_id, "container"))
        .unwrap();
    let mut req = rund_tests::shim::create_request(&ok);
    req.id = ok.id.clone();
    let t = &d.shim.task;
    t.create(ctx(), &req)
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", d.diagnostics()));
    let id = ok.id.clone();
    t.start(
        ctx(),
        &StartRequest {
            id: id.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let waited = t
        .wait(
            ctx(),
            &WaitRequest {
                id: id.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(waited.exit_status, 0);
    t.delete(
        ctx(),
        &DeleteRequest {
            id,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    d.kill_process("", libc::SIGKILL as u32).await.unwrap();
    d.wait_process("").await.unwrap();
    d.delete_process("").await.unwrap();
    drop(ok);
    drop(c);
    drop(vol);
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
    // Once the pod is gone, nothing rund made is left in its cgroup, kept ones included.
    for dir in rund_tests::shim::residue::cgroup_dirs_for(&pod_parent) {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "left in the pod's cgroup: {left:?}");
    }
}
