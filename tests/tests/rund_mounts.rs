//! The container filesystem through ctr with hand-made specs (`ctr run --config`), runc (the
//! reference: Debian's 1.1.5) and rund side by side: mount destinations resolved inside the
//! rootfs (also while a symlink is swapped in), top-only `ro` vs recursive `rro` binds, and
//! what must not change: masked and read-only paths, a read-only root, /dev.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rund_tests::fsview::*;
use rund_tests::ocispec::set_annotation;
use rund_tests::{
    assert_no_leaks_within, busybox_rootfs, LeakSnapshot, RUNC_RUNTIME, RUND_RUNTIME,
};
use serde_json::json;

#[test]
fn symlinked_destinations_land_inside_the_rootfs() {
    let Some(ctd) = start("symlinked_destinations_land_inside_the_rootfs") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    for rt in BOTH {
        let rootfs = ctd.dir.join(format!("rootfs-{}", short(rt)));
        busybox_rootfs(&rootfs).unwrap();
        // Host dirs the image's symlinks point at: they exist outside, not inside.
        let outside = ctd.dir.join(format!("outside-{}", short(rt)));
        std::fs::create_dir(&outside).unwrap();
        let src = ctd.dir.join(format!("src-{}", short(rt)));
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("marker"), "from the volume").unwrap();
        let o = outside.display();
        std::os::unix::fs::symlink(format!("/../../../../..{o}/a"), rootfs.join("abs")).unwrap();
        std::os::unix::fs::symlink(format!("../../../../../..{o}/b"), rootfs.join("rel")).unwrap();
        let id = format!("esc-{}", short(rt));
        let mut spec = ctd
            .oci_spec(
                &id,
                &rootfs,
                &[
                    "sh",
                    "-c",
                    // Through the volume, not stdout: ctr 1.6 with runc-v2 once lost the
                    // tail of a fast exit's stdout in CI.
                    "{ cat /rel/deeper/marker; echo; cat /proc/self/mountinfo; } >/rel/deeper/out",
                ],
            )
            .unwrap();
        add_mount(
            &mut spec,
            json!({"destination": "/abs", "type": "tmpfs", "source": "tmpfs", "options": ["size=4444k"]}),
        );
        add_mount(
            &mut spec,
            json!({"destination": "/rel/deeper", "type": "bind", "source": src, "options": ["rbind"]}),
        );
        let out = run(&ctd, rt, &id, &spec);
        assert!(out.success(), "{rt}: {out:?}");
        let seen = std::fs::read_to_string(src.join("out")).unwrap();
        assert!(seen.starts_with("from the volume"), "{rt}: {seen}");
        let inside = mount_points(&seen);
        let want_abs = format!("{o}/a");
        let want_rel = format!("{o}/b/deeper");
        assert!(
            inside.contains(&want_abs),
            "{rt}: no mount at {want_abs} inside: {inside:?}"
        );
        assert!(
            inside.contains(&want_rel),
            "{rt}: no mount at {want_rel} inside: {inside:?}"
        );
        // Created inside the rootfs, nothing on the host.
        let in_root = rootfs.join(outside.strip_prefix("/").unwrap());
        assert!(in_root.join("a").is_dir(), "{rt}: {}", in_root.display());
        assert!(
            in_root.join("b/deeper").is_dir(),
            "{rt}: {}",
            in_root.display()
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{rt}");
        let on_host = host_mount_points();
        assert!(
            !on_host.iter().any(|m| m.starts_with(&o.to_string())),
            "{rt}: a mount reached the host: {on_host:?}"
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

/// CVE-2021-30465's shape: a volume's directory is swapped with a symlink (here by a host
/// thread, in the CVE by another container sharing the volume) while containers with a mount
/// beneath it are created. The symlink points at "/rootfs", which rund's agent uses to attach
/// the container's rootfs: a path string resolved again after the check would mount over the
/// whole rootfs. Every rund container must start and see the mount inside its own root.
#[test]
fn a_destination_swapped_for_a_symlink_mid_create_stays_inside() {
    let Some(ctd) = start("a_destination_swapped_for_a_symlink_mid_create_stays_inside") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let vol = ctd.dir.join("racevol");
    std::fs::create_dir_all(vol.join("x")).unwrap();
    std::os::unix::fs::symlink("/rootfs", vol.join("l")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, vol) = (stop.clone(), vol.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &vol.join("x"),
                    nix::fcntl::AT_FDCWD,
                    &vol.join("l"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut failures = Vec::new();
    for rt in BOTH {
        for i in 0..25 {
            let id = format!("race-{}-{i}", short(rt));
            let mut spec = sh(&ctd, &id, "grep -c size=4444k /proc/self/mountinfo");
            add_mount(
                &mut spec,
                json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind"]}),
            );
            add_mount(
                &mut spec,
                json!({"destination": "/vol/x", "type": "tmpfs", "source": "tmpfs", "options": ["size=4444k"]}),
            );
            let out = run(&ctd, rt, &id, &spec);
            // runc 1.1 notices some swaps and refuses cleanly; rund's fd never
            // changes meaning, so it has nothing to refuse. Neither may run with
            // the mount somewhere else.
            let ok = if rt == RUNC_RUNTIME {
                // (ctr sometimes loses runc's output of a short run: only a
                // count of 0 is a finding.)
                out.stdout.trim() != "0"
            } else {
                out.success() && out.stdout.trim() == "1"
            };
            if !ok {
                failures.push(format!("{id}: {out:?}"));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

#[test]
fn read_only_bind_keeps_submounts_writable_unless_rro() {
    let Some(ctd) = start("read_only_bind_keeps_submounts_writable_unless_rro") else {
        return;
    };
    let src = ctd.dir.join("rosrc");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    host(&[
        "mount",
        "-t",
        "tmpfs",
        "rosub",
        src.join("sub").to_str().unwrap(),
    ]);
    let before = LeakSnapshot::take(&ctd);
    let script = "for p in /ro/top /ro/sub/x /rro/top /rro/sub/x; do \
                  if touch $p 2>/dev/null; then echo $p rw; else echo $p ro; fi; done";
    for rt in BOTH {
        let id = format!("ro-{}", short(rt));
        let mut spec = sh(&ctd, &id, script);
        add_mount(
            &mut spec,
            json!({"destination": "/ro", "type": "bind", "source": src, "options": ["rbind", "ro"]}),
        );
        add_mount(
            &mut spec,
            json!({"destination": "/rro", "type": "bind", "source": src, "options": ["rbind", "rro"]}),
        );
        let want = ["/ro/top ro", "/ro/sub/x rw", "/rro/top ro", "/rro/sub/x ro"];
        let out = run_for_lines(&ctd, rt, &id, &spec, &want);
        assert!(out.success(), "{rt}: {out:?}");
        assert_eq!(out.stdout.lines().collect::<Vec<_>>(), want, "{rt}");
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
    let _ = Command::new("umount").arg(src.join("sub")).status();
}

/// What the fd-based rewrite must keep: masked paths, read-only paths, a read-only root, the
/// /dev tmpfs and its nodes and links, as runc gives them.
#[test]
fn masks_read_only_paths_root_and_dev_match_runc() {
    let Some(ctd) = start("masks_read_only_paths_root_and_dev_match_runc") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let script = "stat -c %t,%T /proc/keys /proc/timer_list; ls -A /sys/firmware | wc -l; \
        for p in /proc/sys/kernel/domainname /rootfile /dev/shm/x; do \
          if echo x 2>/dev/null > $p; then echo $p rw; else echo $p ro; fi; done; \
        for d in null zero full random urandom tty; do [ -c /dev/$d ] && echo $d; done; \
        for l in fd stdin ptmx; do readlink /dev/$l; done";
    let want = [
        "1,3",
        "1,3",
        "0",
        "/proc/sys/kernel/domainname ro",
        "/rootfile ro",
        "/dev/shm/x rw",
        "null",
        "zero",
        "full",
        "random",
        "urandom",
        "tty",
        "/proc/self/fd",
        "/proc/self/fd/0",
        "pts/ptmx",
    ];
    for (rt, userns) in [
        (RUNC_RUNTIME, true),
        (RUND_RUNTIME, true),
        (RUND_RUNTIME, false),
    ] {
        let id = format!("keep-{}-{userns}", short(rt));
        let mut spec = sh(&ctd, &id, script);
        spec["root"]["readonly"] = json!(true);
        if userns {
            set_annotation(&mut spec, "rund.io/userns", "pod");
        }
        let out = run_for_lines(&ctd, rt, &id, &spec, &want);
        assert!(out.success(), "{id}: {out:?}");
        assert_eq!(out.stdout.lines().collect::<Vec<_>>(), want, "{id}");
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
