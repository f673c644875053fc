//! Per-sandbox user namespaces through containerd and ctr, with `[userns] mode = "always"` (every pod remapped;
//! the default mode, "requested", is in rund_policy.rs): one leased id range per sandbox,
//! idmapped rootfs (plain dir and overlay image) and binds, `rund.io/userns: host`,
//! `rund.io/userns-binds: plain`, spec mappings, exec, and bad input (exhausted pool, malformed
//! mappings) that leaves nothing behind. Filesystems that cannot be idmapped: rund_userns_fs.rs.
//!
//! Every test gives rund its own config (`--runtime-config-path`) whose `state_dir` lies in the
//! instance dir, so `/run/rund` is never touched and `<state_dir>/userns/leases.json` is this
//! test's alone. Every test ends with no lease left and nothing leaked. rund only: runc has no
//! per-sandbox ranges, so with `RUND_IT_RUNTIME` set to another runtime the tests say so and
//! return.

use std::os::unix::fs::{chown, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rund_tests::userns::*;
use rund_tests::{assert_no_leaks_within, CmdOutput, LeakSnapshot, RunSpec};
use serde_json::{json, Value};

#[test]
fn root_is_remapped_to_a_leased_range() {
    userns_test("root_is_remapped_to_a_leased_range", COUNT, |env, _| {
        // Inside: uid_map and gid_map are one range of the pool, not the identity.
        let out = env.run(
            "maps",
            &["cat", "/proc/self/uid_map", "/proc/self/gid_map"],
            &[],
        );
        assert!(out.success(), "{out:?}");
        let rows = parse_map(&out.stdout);
        assert_eq!(rows.len(), 2, "{}", out.stdout);
        assert_eq!(rows[0], rows[1], "uid and gid maps differ: {}", out.stdout);
        assert_eq!((rows[0].0, rows[0].2), (0, SIZE), "{}", out.stdout);
        assert_pool_slot(rows[0].1);

        // From the host: a sleeping container runs as its lease's base, not as 0.
        let pid = env.sleeper("s", &[]);
        let lease = env.lease("s");
        assert_pool_slot(lease.base);
        assert_eq!(lease.size, SIZE);
        assert_eq!(host_ids(pid), (lease.base, lease.base), "pid {pid}");
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        assert_eq!(parse_map(&map), vec![(0, lease.base, SIZE)], "{map}");
        env.remove("s");
    });
}

#[test]
fn dir_rootfs_is_idmapped_not_chowned() {
    userns_test("dir_rootfs_is_idmapped_not_chowned", COUNT, |env, _| {
        let owned = env.rootfs.join("etc/owned");
        std::fs::write(&owned, "x").unwrap();
        chown(&owned, Some(1234), Some(1234)).unwrap();
        let script = "stat -c %u:%g /bin/busybox /etc/passwd /etc/owned && touch /root/new && \
                      stat -c %u:%g /root/new && cat /proc/self/uid_map";
        let out = env.run("dirfs", &["sh", "-c", script], &[]);
        assert!(out.success(), "{out:?}");
        let l = lines(&out, 5);
        assert_eq!(l[..4], ["0:0", "0:0", "1234:1234", "0:0"], "{}", out.stdout);
        assert_pool_slot(parse_map(l[4])[0].1);
        // Nothing was chowned on disk, and container root's write landed as host 0.
        assert_eq!(owner(&env.rootfs.join("bin/busybox")), (0, 0));
        assert_eq!(owner(&owned), (1234, 1234));
        assert_eq!(owner(&env.rootfs.join("root/new")), (0, 0));
        std::fs::remove_file(env.rootfs.join("root/new")).unwrap();
    });
}

#[test]
fn image_rootfs_overlay_is_idmapped() {
    userns_test("image_rootfs_overlay_is_idmapped", COUNT, |env, _| {
        let image = env.ctd.import_busybox_image(&env.ctd.namespace).unwrap();
        let script = "stat -c %u:%g /bin/busybox /etc/passwd && touch /new && \
                      stat -c %u:%g /new && cat /proc/self/uid_map";
        let spec = env.spec("img", &["sh", "-c", script], &[]);
        let spec = RunSpec {
            rootfs: None,
            image: Some(image.into()),
            ..spec
        };
        let out = env.ctd.run_spec(&spec).unwrap();
        assert!(out.success(), "{out:?}");
        let l = lines(&out, 4);
        assert_eq!(l[..3], ["0:0", "0:0", "0:0"], "{}", out.stdout);
        let (inside, host, _) = parse_map(l[3])[0];
        assert_eq!(inside, 0);
        assert_pool_slot(host);
        // The unpacked image layer on disk was not chowned.
        let snaps = env
            .ctd
            .layout
            .root
            .join("io.containerd.snapshotter.v1.overlayfs/snapshots");
        let layers: Vec<PathBuf> = std::fs::read_dir(&snaps)
            .unwrap()
            .flatten()
            .map(|e| e.path().join("fs/bin/busybox"))
            .filter(|p| p.exists())
            .collect();
        assert!(
            !layers.is_empty(),
            "no unpacked layer under {}",
            snaps.display()
        );
        for l in layers {
            assert_eq!(owner(&l), (0, 0), "{}", l.display());
        }
    });
}

/// A host dir for a bind: `owned` (1234:1234, 0644), `secret` (root, 0600), dir mode `mode`;
/// and the `--mount` flag that binds it at /data.
fn volume(env: &Env, mode: u32) -> (PathBuf, String) {
    let dir = env.ctd.dir.join("vol");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    let owned = dir.join("owned");
    std::fs::write(&owned, "mine\n").unwrap();
    chown(&owned, Some(1234), Some(1234)).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let flag = format!("type=bind,src={},dst=/data,options=rbind:rw", dir.display());
    (dir, flag)
}

#[test]
fn idmapped_binds_keep_host_ownership() {
    userns_test("idmapped_binds_keep_host_ownership", COUNT, |env, _| {
        let (vol, mount) = volume(env, 0o755);
        let script = "touch /data/f && stat -c %u:%g /data/owned /data/f && cat /data/secret";
        let out = env.run("idb", &["sh", "-c", script], &["--mount", &mount]);
        assert!(out.success(), "{out:?}");
        assert_eq!(out.stdout, "1234:1234\n0:0\ns3cret\n");
        assert_eq!(
            owner(&vol.join("f")),
            (0, 0),
            "container root's file, on the host"
        );
    });
}

#[test]
fn plain_binds_write_as_the_mapped_uid() {
    userns_test("plain_binds_write_as_the_mapped_uid", COUNT, |env, _| {
        // World-writable, as with docker userns-remap: the mapped root is not host root.
        let (vol, mount) = volume(env, 0o777);
        let script =
            "cat /proc/self/uid_map; touch /data/f; stat -c %u /data/owned; cat /data/secret";
        let flags = [
            "--mount",
            &mount,
            "--annotation",
            "rund.io/userns-binds=plain",
        ];
        let out = env.run("plain", &["sh", "-c", script], &flags);
        assert!(
            !out.success(),
            "reading a root-only host file must fail: {out:?}"
        );
        assert!(out.stderr.contains("Permission denied"), "{out:?}");
        let l = lines(&out, 2);
        let host = parse_map(l[0])[0].1;
        assert_pool_slot(host);
        assert_eq!(
            l[1], "65534",
            "an unmapped host owner reads as the overflow uid"
        );
        let (uid, gid) = owner(&vol.join("f"));
        let got = (u64::from(uid), u64::from(gid));
        assert_eq!(got, (host, host), "container root's file, on the host");
    });
}

#[test]
fn two_pods_get_disjoint_ranges() {
    userns_test("two_pods_get_disjoint_ranges", COUNT, |env, _| {
        let (pa, pb) = (env.sleeper("a", &[]), env.sleeper("b", &[]));
        let (ua, ub) = (host_ids(pa).0, host_ids(pb).0);
        assert_pool_slot(ua);
        assert_pool_slot(ub);
        assert!(ua.abs_diff(ub) >= SIZE, "ranges at {ua} and {ub} overlap");
        let mut leases = env.leases();
        leases.sort_by(|x, y| x.id.cmp(&y.id));
        let want = |id: &str, base| Lease {
            id: id.into(),
            base,
            size: SIZE,
        };
        assert_eq!(leases, vec![want("a", ua), want("b", ub)]);
        env.remove("a");
        assert_eq!(
            env.leases(),
            vec![want("b", ub)],
            "deleting a releases a's range only"
        );
        env.remove("b");
    });
}

#[test]
fn fifty_concurrent_sandboxes_release_their_ranges() {
    const N: usize = 50;
    userns_test(
        "fifty_concurrent_sandboxes_release_their_ranges",
        COUNT,
        |env, _| {
            let ids: Vec<String> = (0..N).map(|i| format!("p{i}")).collect();
            let outs: Vec<CmdOutput> = std::thread::scope(|s| {
                let hs: Vec<_> = ids
                    .iter()
                    .map(|id| {
                        let spec = RunSpec {
                            detach: true,
                            ..env.spec(id, &["sleep", "100000"], &[])
                        };
                        s.spawn(move || env.ctd.run_spec(&spec).unwrap())
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (id, out) in ids.iter().zip(&outs) {
                assert!(out.success(), "{id}: {out:?}");
            }
            // All 50 alive at once: 50 leases, pairwise disjoint, each the host uid of its task.
            let mut leases = env.leases();
            assert_eq!(leases.len(), N, "{leases:?}");
            leases.sort_by_key(|l| l.base);
            for w in leases.windows(2) {
                assert!(w[0].base + w[0].size <= w[1].base, "overlap: {w:?}");
            }
            for l in &leases {
                assert_pool_slot(l.base);
                assert_eq!(host_ids(env.task_pid(&l.id)).0, l.base, "{l:?}");
            }
            std::thread::scope(|s| {
                for id in &ids {
                    s.spawn(move || env.remove(id));
                }
            });
        },
    );
}

#[test]
fn userns_host_annotation_opts_out() {
    let allow = "[policy]\nallow_userns_host = true\n";
    let test = "userns_host_annotation_opts_out";
    userns_test_with(test, COUNT, "always", allow, |env, _| {
        let host = ["--annotation", "rund.io/userns=host"];
        let out = env.run("h1", &["cat", "/proc/self/uid_map"], &host);
        assert!(out.success(), "{out:?}");
        assert_eq!(parse_map(&out.stdout), vec![HOST_MAP], "{}", out.stdout);
        let pid = env.sleeper("h2", &host);
        assert_eq!(host_ids(pid), (0, 0));
        assert_eq!(env.leases(), vec![], "an opted-out pod takes no range");
        env.remove("h2");
    });
}

/// Host pids running exactly `cmdline` in the same pid namespace as `pid`, waiting up to
/// [`GRACE`] for at least one.
fn pids_in_ns_of(pid: u32, cmdline: &str) -> Vec<u32> {
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let matches = |p: &u32| {
        let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmdline && ns(*p) == ns(pid)
    };
    let deadline = Instant::now() + GRACE;
    loop {
        let found: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(matches)
            .collect();
        if !found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn exec_runs_in_the_sandbox_range() {
    userns_test("exec_runs_in_the_sandbox_range", COUNT, |env, _| {
        let pid = env.sleeper("ex", &[]);
        let lease = env.lease("ex");
        let out = env.ctd.task_exec("ex", "id1", &["id", "-u"], None).unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(out.stdout.trim(), "0");
        let map = ["cat", "/proc/self/uid_map"];
        let out = env.ctd.task_exec("ex", "map1", &map, None).unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(parse_map(&out.stdout), vec![(0, lease.base, SIZE)]);
        // A long-running exec, seen from the host, runs as the mapped uid.
        let exec = [
            "task",
            "exec",
            "-d",
            "--exec-id",
            "long",
            "ex",
            "sleep",
            "424242",
        ];
        let out = env.ctd.ctr(&exec).unwrap();
        assert!(out.success(), "{out:?}");
        let found = pids_in_ns_of(pid, "sleep 424242");
        assert_eq!(
            found.len(),
            1,
            "the exec'd sleep in the container's pid ns: {found:?}"
        );
        assert_eq!(host_ids(found[0]), (lease.base, lease.base));
        env.remove("ex");
    });
}

#[test]
fn exhausted_pool_fails_clearly_and_leaves_nothing() {
    userns_test(
        "exhausted_pool_fails_clearly_and_leaves_nothing",
        1,
        |env, _| {
            env.sleeper("first", &[]);
            let first = env.lease("first");
            let before = LeakSnapshot::take(&env.ctd);
            let out = env.run("second", &["true"], &[]);
            assert_bad_input(env, &before, &out, &["exhausted"], &[first]);
            // The pool works again once the range is free.
            env.remove("first");
            env.assert_no_leases();
            let out = env.run("third", &["true"], &[]);
            assert!(out.success(), "{out:?}");
        },
    );
}

/// A spec running `args` with `uid`/`gid` mappings (JSON arrays; null leaves one out) and,
/// with `user_ns`, a `user` entry in linux.namespaces (as OCI wants, and ctr --uidmap and CRI
/// send).
fn spec_with_maps(
    env: &Env,
    id: &str,
    args: &[&str],
    uid: Value,
    gid: Value,
    user_ns: bool,
) -> Value {
    let mut spec = env.ctd.oci_spec(id, &env.rootfs, args).unwrap();
    let linux = &mut spec["linux"];
    for (key, map) in [("uidMappings", uid), ("gidMappings", gid)] {
        if !map.is_null() {
            linux[key] = map;
        }
    }
    if user_ns {
        linux["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "type": "user" }));
    }
    spec
}

fn m(container: u64, host: u64, size: u64) -> Value {
    json!({ "containerID": container, "hostID": host, "size": size })
}

#[test]
fn spec_mappings_are_honoured() {
    userns_test("spec_mappings_are_honoured", COUNT, |env, before| {
        let script = "cat /proc/self/uid_map /proc/self/gid_map; stat -c %u:%g /bin/busybox";
        let (uid, gid) = (
            json!([m(0, 3_000_000, SIZE)]),
            json!([m(0, 3_100_000, SIZE)]),
        );
        for (id, user_ns) in [("own", false), ("own-userns", true)] {
            let args = ["sh", "-c", script];
            let spec = spec_with_maps(env, id, &args, uid.clone(), gid.clone(), user_ns);
            let out = env.run_config(id, &spec);
            assert!(out.success(), "{id}: {out:?}");
            let l = lines(&out, 3);
            let maps = parse_map(&l[..2].join("\n"));
            assert_eq!(
                maps,
                vec![(0, 3_000_000, SIZE), (0, 3_100_000, SIZE)],
                "{id}"
            );
            assert_eq!(
                l[2], "0:0",
                "{id}: the rootfs is idmapped with the spec's maps"
            );
            assert_eq!(env.leases(), vec![], "{id}: the spec's ranges are released");
            assert_no_leaks_within(&env.ctd, before, GRACE);
        }
    });
}

#[test]
fn spec_mappings_cannot_take_a_leased_range() {
    userns_test(
        "spec_mappings_cannot_take_a_leased_range",
        COUNT,
        |env, before| {
            env.sleeper("pooled", &[]);
            let lease = env.lease("pooled");
            let before_clash = LeakSnapshot::take(&env.ctd);
            let clash = json!([m(0, lease.base + 100, 10)]);
            let spec = spec_with_maps(env, "clash", &["true"], clash.clone(), clash, true);
            let out = env.run_config("clash", &spec);
            let leased = lease.base.to_string();
            assert_bad_input(
                env,
                &before_clash,
                &out,
                &["leased to sandbox pooled", &leased],
                std::slice::from_ref(&lease),
            );
            // While a spec-mapped pod runs, the pool hands out other ids.
            let taken = json!([m(0, BASE + SIZE, SIZE)]);
            let spec = spec_with_maps(env, "spec", &["sleep", "1000"], taken.clone(), taken, true);
            env.run_config_detached("spec", &spec);
            env.sleeper("third", &[]);
            let third = env.lease("third");
            assert_ne!(third.base, BASE + SIZE, "the spec's range was leased again");
            for id in ["pooled", "spec", "third"] {
                env.remove(id);
            }
            env.assert_no_leases();
            assert_no_leaks_within(&env.ctd, before, GRACE);
        },
    );
}

#[test]
fn malformed_spec_mappings_fail_clearly() {
    userns_test(
        "malformed_spec_mappings_fail_clearly",
        COUNT,
        |env, before| {
            let good = || json!([m(0, 2_000_000, SIZE)]);
            let uid_overlap = json!([m(0, 2_000_000, SIZE), m(1000, 3_000_000, 10)]);
            let gid_overlap = json!([m(0, 2_000_000, 100), m(100, 2_000_050, 100)]);
            let cases: Vec<(Value, Value, &[&str])> = vec![
                (
                    uid_overlap,
                    good(),
                    &["linux.uidMappings[1]", "overlap inside"],
                ),
                (
                    good(),
                    gid_overlap,
                    &["linux.gidMappings[1]", "overlap on the host"],
                ),
                (
                    json!([m(0, 2_000_000, 0)]),
                    good(),
                    &["linux.uidMappings[0]", "size 0"],
                ),
                (
                    json!([m(0, 4_294_967_000, SIZE)]),
                    good(),
                    &["linux.uidMappings[0]", "wraps"],
                ),
                (good(), Value::Null, &["linux.gidMappings is empty"]),
            ];
            for (i, (uid, gid, needles)) in cases.into_iter().enumerate() {
                let id = format!("bad{i}");
                let spec = spec_with_maps(env, &id, &["true"], uid, gid, true);
                let out = env.run_config(&id, &spec);
                assert_bad_input(env, before, &out, needles, &[]);
            }
        },
    );
}

#[test]
fn bad_userns_annotations_fail_clearly() {
    userns_test(
        "bad_userns_annotations_fail_clearly",
        COUNT,
        |env, before| {
            let cases = [
                ("rund.io/userns=private", "rund.io/userns"),
                ("rund.io/userns-binds=chown", "rund.io/userns-binds"),
            ];
            for (i, (ann, needle)) in cases.iter().enumerate() {
                let out = env.run(&format!("ann{i}"), &["true"], &["--annotation", ann]);
                assert_bad_input(env, before, &out, &[needle], &[]);
            }
        },
    );
}
