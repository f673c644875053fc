//! User namespaces on filesystems that cannot be idmapped, through containerd 1.6 and ctr with
//! `[userns] mode = "always"`: a bind of a device node (`/dev/fuse`) or of a kernel filesystem
//! (proc, sysfs) is bound plainly and works; a bind or rootfs on a filesystem the kernel
//! refuses to idmap (ramfs, and an overlay mount used as a directory rootfs, as on nested
//! nodes) fails Create naming the path, its filesystem and `[userns] on_unsupported`; with
//! `on_unsupported = "host"` such a pod runs without a user namespace, while a pod that asked
//! for one still fails. rund only.

use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use rund_tests::userns::*;
use rund_tests::{LeakSnapshot, RunSpec};

/// A ramfs under the instance dir holding `hello` (the kernel refuses to idmap ramfs).
fn ramfs(env: &Env) -> PathBuf {
    let dir = env.ctd.dir.join("ramfs");
    std::fs::create_dir_all(&dir).unwrap();
    mount(
        Some("ramfs"),
        &dir,
        Some("ramfs"),
        MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    std::fs::write(dir.join("hello"), "hello\n").unwrap();
    dir
}

/// An overlay over the busybox rootfs, mounted under the instance dir: a directory rootfs that
/// cannot be idmapped (overlayfs itself has no idmapped-mount support).
fn overlay_rootfs(env: &Env) -> PathBuf {
    let base = env.ctd.dir.join("ovl");
    let (upper, work, merged) = (base.join("upper"), base.join("work"), base.join("merged"));
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        env.rootfs.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        &merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(data.as_str()),
    )
    .unwrap();
    merged
}

fn unmount(p: &Path) {
    umount2(p, MntFlags::MNT_DETACH).unwrap();
}

fn bind_flag(src: &Path) -> String {
    format!("type=bind,src={},dst=/data,options=rbind:ro", src.display())
}

/// `ctr run --rm` of `args` on `rootfs` with this test's rund config and `flags`.
fn run_on(
    env: &Env,
    id: &str,
    rootfs: &Path,
    args: &[&str],
    flags: &[&str],
) -> rund_tests::CmdOutput {
    let spec = RunSpec {
        rootfs: Some(rootfs.to_path_buf()),
        ..env.spec(id, args, flags)
    };
    env.ctd.run_spec(&spec).unwrap()
}

#[test]
fn device_nodes_and_kernel_filesystems_are_bound_plainly() {
    let test = "device_nodes_and_kernel_filesystems_are_bound_plainly";
    userns_test(test, COUNT, |env, _| {
        let mounts = [
            "--mount",
            "type=bind,src=/dev/fuse,dst=/dev/fuse,options=rbind:rw",
            "--mount",
            "type=bind,src=/proc/sys,dst=/hostsys,options=rbind:ro",
            "--mount",
            "type=bind,src=/sys/kernel,dst=/hostkernel,options=rbind:ro",
        ];
        let script = "[ -c /dev/fuse ] && stat -c %t:%T /dev/fuse; cat /hostsys/kernel/ostype; \
                      [ -e /hostkernel/uevent_seqnum ] && echo kernel; cat /proc/self/uid_map";
        let out = env.run("plain", &["sh", "-c", script], &mounts);
        assert!(out.success(), "{out:?}");
        let l = lines(&out, 4);
        assert_eq!(l[..3], ["a:e5", "Linux", "kernel"], "{}", out.stdout);
        let (inside, host, size) = parse_map(l[3])[0];
        assert_eq!((inside, size), (0, SIZE), "{}", out.stdout);
        assert_pool_slot(host);
    });
}

#[test]
fn unsupported_filesystems_fail_naming_the_key() {
    let test = "unsupported_filesystems_fail_naming_the_key";
    userns_test(test, COUNT, |env, _| {
        let ram = ramfs(env);
        let merged = overlay_rootfs(env);
        let before = LeakSnapshot::take(&env.ctd);
        let ram_s = ram.display().to_string();
        let out = env.run("ram", &["true"], &["--mount", &bind_flag(&ram)]);
        let key = "[userns] on_unsupported = \"host\"";
        assert_bad_input(env, &before, &out, &[&ram_s, "(ramfs)", key], &[]);
        let merged_s = merged.display().to_string();
        let out = run_on(env, "ovl", &merged, &["true"], &[]);
        assert_bad_input(env, &before, &out, &[&merged_s, "(overlay)", key], &[]);
        unmount(&merged);
        unmount(&ram);
    });
}

#[test]
fn on_unsupported_host_runs_such_pods_without_a_user_namespace() {
    let test = "on_unsupported_host_runs_such_pods_without_a_user_namespace";
    let host = "on_unsupported = \"host\"\n";
    userns_test_with(test, COUNT, "always", host, |env, _| {
        let ram = ramfs(env);
        let merged = overlay_rootfs(env);
        let before = LeakSnapshot::take(&env.ctd);
        let flags = ["--mount", &bind_flag(&ram)];
        let out = env.run(
            "ram",
            &["sh", "-c", "cat /data/hello /proc/self/uid_map"],
            &flags,
        );
        assert!(out.success(), "{out:?}");
        let l = lines(&out, 2);
        assert_eq!(l[0], "hello");
        assert_eq!(
            parse_map(l[1]),
            vec![HOST_MAP],
            "runs in the host user namespace"
        );
        let out = run_on(env, "ovl", &merged, &["cat", "/proc/self/uid_map"], &[]);
        assert!(out.success(), "{out:?}");
        assert_eq!(parse_map(&out.stdout), vec![HOST_MAP]);
        assert_eq!(env.leases(), vec![], "an exempted pod takes no range");
        let log = std::fs::read_to_string(&env.ctd.log).unwrap();
        assert!(
            log.contains("no user namespace for this pod") && log.contains("(ramfs)"),
            "the exemption is logged, not silent"
        );
        // Other pods are still remapped.
        let out = env.run("other", &["cat", "/proc/self/uid_map"], &[]);
        assert!(out.success(), "{out:?}");
        assert_pool_slot(parse_map(&out.stdout)[0].1);
        // A pod that asked for a user namespace never runs without one.
        let mut asked = flags.to_vec();
        asked.extend(["--annotation", "rund.io/userns=pod"]);
        let out = env.run("asked", &["true"], &asked);
        let ram_s = ram.display().to_string();
        assert_bad_input(env, &before, &out, &[&ram_s, "on_unsupported"], &[]);
        unmount(&merged);
        unmount(&ram);
    });
}
