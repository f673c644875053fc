//! Issue 5 through containerd 1.6 and ctr: user namespaces on by default, one leased id range per
//! sandbox, idmapped rootfs (plain dir and overlay image) and binds, `rund.io/userns: host`,
//! `rund.io/userns-binds: plain`, spec mappings, exec, and bad input (exhausted pool, a bind on
//! a filesystem without idmapped mounts, malformed mappings) that leaves nothing behind.
//!
//! Every test gives rund its own config (`--runtime-config-path`) whose `state_dir` lies in the
//! instance dir, so `/run/rund` is never touched and `<state_dir>/userns/leases.json` is this
//! test's alone. Every test ends with no lease left and nothing leaked. rund only: runc has no
//! per-sandbox ranges, so with `RUND_IT_RUNTIME` set to another runtime the tests say so and
//! return.

use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rund_tests::ocispec::ConfigRun;
use rund_tests::{
    assert_no_leaks_within, runtime_under_test, CmdOutput, Containerd, ContainerdOpts,
    LeakSnapshot, RunSpec, RUND_RUNTIME,
};
use serde_json::{json, Value};

/// The pool every test configures (rund's defaults).
const BASE: u64 = 1_000_000;
const SIZE: u64 = 65_536;
const COUNT: u64 = 1024;
/// Shims exit asynchronously after delete; the machine is small and busy.
const GRACE: Duration = Duration::from_secs(60);
const CTR_TIMEOUT: Duration = Duration::from_secs(240);

/// A private containerd with rund, a busybox rootfs and a rund config of its own.
struct Env {
    ctd: Containerd,
    rootfs: PathBuf,
    config: PathBuf,
    state: PathBuf,
}

/// Runs `body` against a fresh [`Env`] whose pool has `count` ranges, then asserts that no
/// lease is left and nothing leaked since just before `body`.
fn userns_test(test: &str, count: u64, body: impl FnOnce(&Env, &LeakSnapshot)) {
    if runtime_under_test() != RUND_RUNTIME {
        eprintln!(
            "SKIP {test}: per-sandbox user namespaces are rund's, not {}",
            runtime_under_test()
        );
        return;
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        eprintln!("SKIP {test}: user namespaces are disabled (user.max_user_namespaces = 0)");
        return;
    }
    let Some(ctd) = Containerd::start_rund_or_skip(test, ContainerdOpts::new()) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let (state, config) = (ctd.dir.join("rund-state"), ctd.dir.join("rund.toml"));
    let toml = format!(
        "state_dir = {:?}\n[userns]\nenabled = true\nbase = {BASE}\nsize = {SIZE}\ncount = {count}\n",
        state.display().to_string()
    );
    std::fs::write(&config, toml).unwrap();
    let env = Env {
        ctd,
        rootfs,
        config,
        state,
    };
    let before = LeakSnapshot::take(&env.ctd);
    body(&env, &before);
    env.assert_no_leases();
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    id: String,
    base: u64,
    size: u64,
}

impl Env {
    /// `ctr run` of `args` on the dir rootfs with this test's rund config and `flags`.
    fn spec(&self, id: &str, args: &[&str], flags: &[&str]) -> RunSpec {
        let mut f = strs(&["--runtime-config-path", &self.config.display().to_string()]);
        f.extend(strs(flags));
        RunSpec {
            id: id.into(),
            rootfs: Some(self.rootfs.clone()),
            args: strs(args),
            flags: f,
            timeout: CTR_TIMEOUT,
            ..RunSpec::new(RUND_RUNTIME)
        }
    }

    /// A foreground `ctr run --rm`; the output whatever the exit status.
    fn run(&self, id: &str, args: &[&str], flags: &[&str]) -> CmdOutput {
        self.ctd.run_spec(&self.spec(id, args, flags)).unwrap()
    }

    /// `ctr run -d` of a sleeper; returns the task's host pid.
    fn sleeper(&self, id: &str, flags: &[&str]) -> u32 {
        let spec = RunSpec {
            detach: true,
            ..self.spec(id, &["sleep", "100000"], flags)
        };
        let out = self.ctd.run_spec(&spec).unwrap();
        assert!(out.success(), "{id}: {out:?}");
        self.task_pid(id)
    }

    fn task_pid(&self, id: &str) -> u32 {
        let tasks = self.ctd.task_list().unwrap();
        let t = tasks.iter().find(|t| t.id == id);
        let t = t.unwrap_or_else(|| panic!("no task {id} in {tasks:?}"));
        assert!(t.pid > 0, "{t:?}");
        t.pid
    }

    /// Kill, delete the task and the container, and wait until the task is gone.
    fn remove(&self, id: &str) {
        self.ctd.remove_container(id);
        self.ctd.wait_for_status(id, "absent", GRACE).unwrap();
    }

    /// `ctr run --rm --config` of a full OCI spec with this test's rund config.
    fn run_config(&self, id: &str, spec: &Value) -> CmdOutput {
        let opts = ConfigRun {
            runtime_config: Some(self.config.clone()),
            ..ConfigRun::default()
        };
        self.ctd.run_config(id, spec, &opts).unwrap()
    }

    /// The leases in `<state_dir>/userns/leases.json` (none when the file does not exist).
    fn leases(&self) -> Vec<Lease> {
        let file = self.state.join("userns/leases.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(v["version"], 1, "{text}");
        let list = v["leases"]
            .as_array()
            .unwrap_or_else(|| panic!("no leases: {text}"));
        list.iter()
            .map(|l| Lease {
                id: l["sandbox_id"].as_str().unwrap().to_owned(),
                base: l["host_base"].as_u64().unwrap(),
                size: l["size"].as_u64().unwrap(),
            })
            .collect()
    }

    fn lease(&self, id: &str) -> Lease {
        let all = self.leases();
        let l = all.iter().find(|l| l.id == id).cloned();
        l.unwrap_or_else(|| panic!("no lease for {id}: {all:?}"))
    }

    /// Waits (deletion is asynchronous) until no lease is left.
    fn assert_no_leases(&self) {
        let deadline = Instant::now() + GRACE;
        while !self.leases().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(
            self.leases(),
            vec![],
            "leases left in {}",
            self.state.display()
        );
    }
}

/// A leased range is one of the pool's slots.
fn assert_pool_slot(base: u64) {
    assert!(
        base >= BASE && (base - BASE).is_multiple_of(SIZE) && (base - BASE) / SIZE < COUNT,
        "host base {base} is not base {BASE} + k*{SIZE}, k < {COUNT}"
    );
}

/// (real uid, real gid) of a host pid; effective, saved and fs ids must agree.
fn host_ids(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ids = |key: &str| -> u64 {
        let line = status.lines().find_map(|l| l.strip_prefix(key)).unwrap();
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(f.iter().all(|x| *x == f[0]), "pid {pid} {key} {f:?}");
        f[0]
    };
    (ids("Uid:"), ids("Gid:"))
}

/// Rows of a uid_map/gid_map.
fn parse_map(text: &str) -> Vec<(u64, u64, u64)> {
    let row = |l: &str| {
        let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(f.len(), 3, "bad map row {l:?}");
        (f[0], f[1], f[2])
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(row)
        .collect()
}

fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.uid(), m.gid())
}

/// The output's lines; fails unless there are exactly `n`.
fn lines(out: &CmdOutput, n: usize) -> Vec<&str> {
    let l: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(l.len(), n, "{out:?}");
    l
}

/// Bad input: `ctr run` failed with an error naming every needle, the leases are exactly
/// `leases`, and nothing (mount, cgroup, process, socket, bundle) outlives `before`.
fn assert_bad_input(
    env: &Env,
    before: &LeakSnapshot,
    out: &CmdOutput,
    needles: &[&str],
    leases: &[Lease],
) {
    assert!(!out.success(), "must fail: {out:?}");
    eprintln!("ctr's error: {}", out.stderr.trim());
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "ctr's error must name {n:?}: {}",
            out.stderr
        );
    }
    assert_eq!(
        env.leases(),
        leases,
        "a failed start must hold no new lease"
    );
    assert_no_leaks_within(&env.ctd, before, GRACE);
}

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
    userns_test("userns_host_annotation_opts_out", COUNT, |env, _| {
        let host = ["--annotation", "rund.io/userns=host"];
        let out = env.run("h1", &["cat", "/proc/self/uid_map"], &host);
        assert!(out.success(), "{out:?}");
        assert_eq!(
            parse_map(&out.stdout),
            vec![(0, 0, 4_294_967_295)],
            "{}",
            out.stdout
        );
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

#[test]
fn bind_without_idmap_support_fails_clearly() {
    userns_test(
        "bind_without_idmap_support_fails_clearly",
        COUNT,
        |env, before| {
            for (i, src) in ["/proc/sys", "/sys/kernel"].iter().enumerate() {
                let mount = format!("type=bind,src={src},dst=/data,options=rbind:ro");
                let out = env.run(&format!("noidmap{i}"), &["true"], &["--mount", &mount]);
                assert_bad_input(env, before, &out, &[src, "idmapped mount"], &[]);
            }
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
            assert_eq!(env.leases(), vec![], "{id}: spec mappings take no lease");
            assert_no_leaks_within(&env.ctd, before, GRACE);
        }
    });
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
