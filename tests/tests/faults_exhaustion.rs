//! Fault suite, resources exhausted: rund's state dir on a full filesystem, and a pod shim
//! whose fd limit is lowered (prlimit) below what a Create needs. Create must fail with an
//! error naming the cause, leave no partial state, keep the shim alive, and work again once
//! the resource is back.

use std::io::Write;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use rund_tests::faults::probe::{fd_count, nofile, set_soft_nofile, shim_of};
use rund_tests::faults::{FaultEnv, GRACE};
use rund_tests::ocispec::is_alive;
use rund_tests::{ContainerSpec, ContainerdOpts, PodSpec, BUSYBOX_IMAGE};

/// Fills the filesystem of `dir` with `<dir>/filler` until ENOSPC.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
}

#[test]
fn full_state_dir_fails_create_cleanly_and_recovers() {
    let test = "full_state_dir_fails_create_cleanly_and_recovers";
    let userns = "[userns]\nmode = \"always\"\n";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new(), "", userns) else {
        return;
    };
    // Leases and the cgroup pool's files live on a 1 MiB tmpfs.
    std::fs::create_dir_all(&env.state).unwrap();
    mount(
        Some("tmpfs"),
        &env.state,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=1m,mode=0700"),
    )
    .unwrap();
    let unmount = scopeguard(&env.state);
    // A first pod makes the lock, lease and pool files.
    let out = env.ctd.run_spec(&env.spec("warm", &["true"])).unwrap();
    assert!(out.success(), "{out:?}");
    fill(&env.state);
    let before = env.leftovers(&[]);

    let out = env.ctd.run_spec(&env.spec("full", &["true"])).unwrap();
    assert!(!out.success(), "Create on a full state dir: {out:?}");
    let state = env.state.display().to_string();
    assert!(
        out.stderr.contains("No space left on device") && out.stderr.contains(&state),
        "the error names the cause and the state path {state}: {:?}",
        out.stderr
    );
    let _ = env.ctd.container_delete("full");
    env.assert_clean(&before);

    std::fs::remove_file(env.state.join("filler")).unwrap();
    let out = env
        .ctd
        .run_spec(&env.spec("again", &["echo", "ok"]))
        .unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "ok\n"),
        "Create works once space is free: {out:?}"
    );
    env.assert_clean(&before);
    drop(unmount);
}

/// Unmounts the state tmpfs when the test ends, even on failure.
fn scopeguard(path: &Path) -> impl Drop + '_ {
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = umount2(self.0, MntFlags::MNT_DETACH);
        }
    }
    Unmount(path)
}

#[test]
fn shim_out_of_fds_fails_create_clearly_without_abort() {
    let test = "shim_out_of_fds_fails_create_clearly_without_abort";
    let Some(env) = FaultEnv::start(test, ContainerdOpts::new().cri(), "", "") else {
        return;
    };
    let cri = env.ctd.cri_client().expect("CRI client");
    let before = env.leftovers(&[]);
    let pod = PodSpec::new("fds", &env.ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let shim = shim_of(&env.ctd, &pod_id).expect("the pod's shim");
    let first = ContainerSpec::new("first", BUSYBOX_IMAGE, &["sleep", "100000"]);
    cri.create_and_start(&pod_id, &first, &pod).expect("first");
    let (soft, _) = nofile(shim);
    let running = env.leftovers(&[shim]);

    // Lower the limit step by step towards what the shim holds, until a Create fails; each
    // success is removed again. The last steps leave no fd for anything, logging included.
    let held = fd_count(shim).expect("shim fds") as u64;
    let mut failure = None;
    for headroom in (0..=24).rev() {
        set_soft_nofile(shim, held + headroom);
        let name = format!("starved-{headroom}");
        let starved = ContainerSpec::new(&name, BUSYBOX_IMAGE, &["sleep", "100000"]);
        // CRI's StartContainer is where the shim gets Create.
        let id = cri.create_container(&pod_id, &starved, &pod).unwrap();
        let started = cri.start_container(&id);
        assert!(is_alive(shim), "the shim survives running out of fds");
        if let Err(e) = started {
            failure = Some((headroom, e.to_string(), id));
            break;
        }
        cri.stop_container(&id, 0).unwrap();
        cri.remove_container(&id).unwrap();
    }
    let (headroom, msg, starved_id) = failure.expect("a Create fails with no fd left");
    assert!(
        msg.contains("Too many open files"),
        "the error names the cause (headroom {headroom}): {msg}"
    );
    set_soft_nofile(shim, soft);
    cri.remove_container(&starved_id).unwrap();
    // Nothing of the failed Create remains in the pod (the first container runs on).
    env.assert_clean(&running);
    let again = ContainerSpec::new("again", BUSYBOX_IMAGE, &["sleep", "100000"]);
    let id = cri
        .create_and_start(&pod_id, &again, &pod)
        .expect("Create works once fds are back");
    let out = cri.exec_sync(&id, &["echo", "fine"], 30).expect("exec");
    assert_eq!(out.stdout, b"fine\n", "{out:?}");
    cri.stop_container(&id, 0).unwrap();
    cri.remove_container(&id).unwrap();
    env.assert_clean(&running);
    cri.remove_pod(&pod_id);
    let deadline = std::time::Instant::now() + GRACE;
    while is_alive(shim) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    env.assert_clean(&before);
}
