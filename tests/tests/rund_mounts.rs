//! The container filesystem through ctr with hand-made specs (`ctr run --config`), each run
//! against runc (the reference: Debian's 1.1.5) and rund in one private containerd:
//! mount destinations resolved inside the rootfs (also while a symlink is swapped in),
//! rootfsPropagation (rshared both ways, the default rslave one way, refused in a user
//! namespace), top-only `ro` vs recursive `rro` binds, container sysctls (written before
//! /proc/sys turns read-only; non-namespaced or escaping keys refused) and the container's own
//! cgroup (v1 here; the v2 test runs only on a pure v2 host, i.e. the VM suite).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rund_tests::ocispec::{set_annotation, ConfigRun};
use rund_tests::{
    assert_no_leaks_within, busybox_rootfs, CmdOutput, Containerd, ContainerdOpts, LeakSnapshot,
    RUNC_RUNTIME, RUND_RUNTIME,
};
use serde_json::{json, Value};

const BOTH: [&str; 2] = [RUNC_RUNTIME, RUND_RUNTIME];
const WAIT: Duration = Duration::from_secs(60);

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, ContainerdOpts::new().with_runc())
}

fn short(runtime: &str) -> &'static str {
    if runtime == RUNC_RUNTIME {
        "runc"
    } else {
        "rund"
    }
}

fn run(ctd: &Containerd, runtime: &str, id: &str, spec: &Value) -> CmdOutput {
    let opts = ConfigRun {
        runtime: Some(runtime.into()),
        ..ConfigRun::default()
    };
    ctd.run_config(id, spec, &opts).unwrap()
}

fn run_detached(ctd: &Containerd, runtime: &str, id: &str, spec: &Value) {
    let opts = ConfigRun {
        runtime: Some(runtime.into()),
        detach: true,
        ..ConfigRun::default()
    };
    let out = ctd.run_config(id, spec, &opts).unwrap();
    assert!(out.success(), "{id}: {out:?}\n{}", ctd.log_tail(30));
}

/// A spec running `sh -c script` on the instance's busybox rootfs.
fn sh(ctd: &Containerd, id: &str, script: &str) -> Value {
    let rootfs = ctd.busybox_rootfs().unwrap();
    ctd.oci_spec(id, &rootfs, &["sh", "-c", script]).unwrap()
}

fn add_mount(spec: &mut Value, m: Value) {
    spec["mounts"].as_array_mut().unwrap().push(m);
}

fn add_cap(spec: &mut Value, cap: &str) {
    for set in ["bounding", "effective", "permitted"] {
        spec["process"]["capabilities"][set]
            .as_array_mut()
            .unwrap()
            .push(json!(cap));
    }
}

/// Mount points (field 5) of a mountinfo text.
fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .collect()
}

fn host_mount_points() -> Vec<String> {
    mount_points(&std::fs::read_to_string("/proc/self/mountinfo").unwrap())
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn host(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

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
                    "cat /rel/deeper/marker; echo; cat /proc/self/mountinfo",
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
        assert!(
            out.stdout.starts_with("from the volume"),
            "{rt}: {}",
            out.stdout
        );
        let inside = mount_points(&out.stdout);
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

/// A tmpfs at `path`, in a peer group of its own (shared), unmounted (with what propagated
/// into it) on drop.
struct SharedVol(PathBuf);

impl SharedVol {
    fn new(path: PathBuf) -> SharedVol {
        std::fs::create_dir_all(&path).unwrap();
        let p = path.to_str().unwrap();
        host(&["mount", "-t", "tmpfs", "rund-vol", p]);
        host(&["mount", "--make-shared", p]);
        for d in ["fromhost", "fromctr"] {
            std::fs::create_dir(path.join(d)).unwrap();
        }
        SharedVol(path)
    }
}

impl Drop for SharedVol {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .args(["-R", "-l"])
            .arg(&self.0)
            .status();
    }
}

/// Waits for /vol/go, records whether the host's mount arrived, mounts a tmpfs of its own
/// under the volume and says so in /vol/done (on the shared tmpfs itself, which the host sees
/// whatever the propagation).
const PROPAGATION_SCRIPT: &str = "while [ ! -e /vol/go ]; do sleep 0.05; done; \
     if [ -e /vol/fromhost/flag ]; then echo yes > /vol/saw; else echo no > /vol/saw; fi; \
     mount -t tmpfs ctr /vol/fromctr && touch /vol/fromctr/ok && touch /vol/done; \
     exec sleep 1000";

/// Runs PROPAGATION_SCRIPT with the volume bound at /vol; returns (the container saw the
/// host's mount, the host saw the container's).
fn propagation_round(
    ctd: &Containerd,
    rt: &str,
    id: &str,
    root: Option<&str>,
    bind_opts: &[&str],
    userns: bool,
) -> (bool, bool) {
    let vol = SharedVol::new(ctd.dir.join(format!("vol-{id}")));
    let mut spec = sh(ctd, id, PROPAGATION_SCRIPT);
    let mut opts = vec!["rbind"];
    opts.extend(bind_opts);
    add_mount(
        &mut spec,
        json!({"destination": "/vol", "type": "bind", "source": vol.0, "options": opts}),
    );
    if let Some(p) = root {
        spec["linux"]["rootfsPropagation"] = json!(p);
    }
    add_cap(&mut spec, "CAP_SYS_ADMIN");
    if !userns {
        set_annotation(&mut spec, "rund.io/userns", "host");
    }
    run_detached(ctd, rt, id, &spec);
    let from_host = vol.0.join("fromhost");
    host(&["mount", "-t", "tmpfs", "host", from_host.to_str().unwrap()]);
    std::fs::write(from_host.join("flag"), "").unwrap();
    std::fs::write(vol.0.join("go"), "").unwrap();
    wait_for(&format!("{id}: /vol/done"), || vol.0.join("done").exists());
    let saw = std::fs::read_to_string(vol.0.join("saw")).unwrap();
    let back = vol.0.join("fromctr/ok").exists();
    ctd.remove_container(id);
    (saw.trim() == "yes", back)
}

#[test]
fn rshared_rootfs_propagation_is_bidirectional() {
    let Some(ctd) = start("rshared_rootfs_propagation_is_bidirectional") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    for rt in BOTH {
        let id = format!("rshared-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, Some("rshared"), &["rshared"], false);
        assert_eq!(
            got,
            (true, true),
            "{rt}: (host->container, container->host)"
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

#[test]
fn default_rslave_propagation_receives_and_never_sends() {
    let Some(ctd) = start("default_rslave_propagation_receives_and_never_sends") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    for rt in BOTH {
        let id = format!("rslave-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, None, &[], false);
        assert_eq!(
            got,
            (true, false),
            "{rt}: (host->container, container->host)"
        );
        let id = format!("rprivate-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, Some("rprivate"), &[], false);
        assert_eq!(got, (false, false), "{rt}: rprivate");
    }
    // rund's own user namespace, no propagation asked for: still receives, and a mount made
    // inside (by root of the user namespace) never reaches the host.
    let got = propagation_round(&ctd, RUND_RUNTIME, "rslave-userns", None, &[], true);
    assert_eq!(got, (true, false), "rund in a user namespace");
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

/// With a user namespace a container's mounts must never reach the host: shared propagation
/// is refused at Create, naming the cause.
#[test]
fn shared_propagation_is_refused_in_a_user_namespace() {
    let Some(ctd) = start("shared_propagation_is_refused_in_a_user_namespace") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let vol = ctd.dir.join("uvol");
    std::fs::create_dir(&vol).unwrap();
    for (id, root, opt) in [
        ("u-root", "rshared", "rslave"),
        ("u-bind", "rslave", "rshared"),
    ] {
        let mut spec = sh(&ctd, id, "true");
        spec["linux"]["rootfsPropagation"] = json!(root);
        add_mount(
            &mut spec,
            json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind", opt]}),
        );
        let out = run(&ctd, RUND_RUNTIME, id, &spec);
        assert!(!out.success(), "{id}: {out:?}");
        assert!(
            out.stderr.contains("user namespace") && out.stderr.contains("rshared"),
            "{id}: {}",
            out.stderr
        );
    }
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
        let out = run(&ctd, rt, &id, &spec);
        assert!(out.success(), "{rt}: {out:?}");
        assert_eq!(
            out.stdout.lines().collect::<Vec<_>>(),
            ["/ro/top ro", "/ro/sub/x rw", "/rro/top ro", "/rro/sub/x ro"],
            "{rt}"
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
    let _ = Command::new("umount").arg(src.join("sub")).status();
}

#[test]
fn container_sysctls_are_set_before_proc_sys_turns_read_only() {
    let Some(ctd) = start("container_sysctls_are_set_before_proc_sys_turns_read_only") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let script = "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmax \
                  /proc/sys/net/ipv4/ping_group_range; \
                  if echo 0 > /proc/sys/kernel/shm_rmid_forced; then echo writable; else echo read-only; fi";
    // rund twice: with its default user namespace and without.
    for (rt, userns) in [
        (RUNC_RUNTIME, true),
        (RUND_RUNTIME, true),
        (RUND_RUNTIME, false),
    ] {
        let id = format!("sysctl-{}-{userns}", short(rt));
        let mut spec = sh(&ctd, &id, script);
        spec["linux"]["sysctl"] = json!({
            "kernel.shm_rmid_forced": "1",
            "kernel.msgmax": "4321",
            "net/ipv4/ping_group_range": "0 0",
        });
        assert!(
            spec["linux"]["readonlyPaths"]
                .as_array()
                .unwrap()
                .contains(&json!("/proc/sys")),
            "ctr's default spec makes /proc/sys read-only"
        );
        if !userns {
            set_annotation(&mut spec, "rund.io/userns", "host");
        }
        let out = run(&ctd, rt, &id, &spec);
        assert!(out.success(), "{id}: {out:?}");
        let l: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            l,
            ["1", "4321", "0\t0", "read-only"],
            "{id}: {}",
            out.stdout
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

#[test]
fn sysctls_outside_the_containers_namespaces_fail_at_create() {
    let Some(ctd) = start("sysctls_outside_the_containers_namespaces_fail_at_create") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let cases: [(&str, &str, bool); 5] = [
        ("vm.swappiness", "not in a separate kernel namespace", false),
        ("kernel.hostname", "hostname", false),
        ("kernel..shmmax", "empty component", false),
        ("net/../../../../etc/x", "\"..\"", false),
        ("net.ipv4.ip_forward", "network namespace", true),
    ];
    for rt in BOTH {
        for (i, (key, why, host_net)) in cases.iter().enumerate() {
            let id = format!("badsysctl-{}-{i}", short(rt));
            let mut spec = sh(&ctd, &id, "true");
            spec["linux"]["sysctl"] = json!({ *key: "1" });
            if *host_net {
                let ns = spec["linux"]["namespaces"].as_array_mut().unwrap();
                ns.retain(|n| n["type"] != "network");
            }
            set_annotation(&mut spec, "rund.io/userns", "host");
            let out = run(&ctd, rt, &id, &spec);
            assert!(!out.success(), "{id} ({key}) must fail: {out:?}");
            if rt == RUND_RUNTIME {
                assert!(
                    out.stderr.contains(key) && out.stderr.contains(why),
                    "{id}: the error must name {key:?} and {why:?}: {}",
                    out.stderr
                );
            }
            ctd.remove_container(&id);
        }
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

fn cgroup2_host() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/cgroup") && l.contains(" cgroup2 "))
}

const LIMIT: u64 = 48 << 20;

fn cgroup_spec(ctd: &Containerd, id: &str, script: &str, userns: bool) -> Value {
    let mut spec = sh(ctd, id, script);
    add_mount(
        &mut spec,
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
               "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}),
    );
    spec["linux"]["resources"]["memory"] = json!({ "limit": LIMIT });
    if !userns {
        set_annotation(&mut spec, "rund.io/userns", "host");
    }
    spec
}

#[test]
fn cgroup_v1_shows_only_the_containers_own_cgroup() {
    if cgroup2_host() {
        eprintln!("SKIP cgroup_v1_shows_only_the_containers_own_cgroup: a pure cgroup v2 host");
        return;
    }
    let Some(ctd) = start("cgroup_v1_shows_only_the_containers_own_cgroup") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    // A sibling whose cgroup must not be visible.
    let sib = format!("sibling-{}", std::process::id());
    run_detached(&ctd, RUNC_RUNTIME, &sib, &sh(&ctd, &sib, "exec sleep 1000"));
    let script = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
                  for d in /sys/fs/cgroup/memory/* /sys/fs/cgroup/pids/*; do [ -d $d ] && echo dir $d; done; \
                  grep -qx $$ /sys/fs/cgroup/memory/cgroup.procs && echo mine; \
                  if echo 1 > /sys/fs/cgroup/pids/pids.max; then echo writable; else echo read-only; fi";
    for (rt, userns) in [
        (RUNC_RUNTIME, false),
        (RUND_RUNTIME, true),
        (RUND_RUNTIME, false),
    ] {
        let id = format!("cg-{}-{userns}", short(rt));
        let out = run(&ctd, rt, &id, &cgroup_spec(&ctd, &id, script, userns));
        assert!(out.success(), "{id}: {out:?}");
        let l: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            l,
            [LIMIT.to_string().as_str(), "mine", "read-only"],
            "{id}: the container's own limit at the top, no other cgroup below, its one process, read-only:\n{}",
            out.stdout
        );
    }
    ctd.remove_container(&sib);
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

#[test]
fn cgroup_v2_shows_only_the_containers_own_subtree() {
    if !cgroup2_host() {
        eprintln!(
            "SKIP cgroup_v2_shows_only_the_containers_own_subtree: needs a pure cgroup v2 host \
             (the VM suite); this host is cgroup v1"
        );
        return;
    }
    let Some(ctd) = start("cgroup_v2_shows_only_the_containers_own_subtree") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let script = "cat /sys/fs/cgroup/memory.max; \
                  for d in /sys/fs/cgroup/*; do [ -d $d ] && echo dir $d; done; \
                  grep -qx $$ /sys/fs/cgroup/cgroup.procs && echo mine";
    for (rt, userns) in [
        (RUNC_RUNTIME, false),
        (RUND_RUNTIME, true),
        (RUND_RUNTIME, false),
    ] {
        let id = format!("cg2-{}-{userns}", short(rt));
        let mut spec = cgroup_spec(&ctd, &id, script, userns);
        spec["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "cgroup"}));
        let out = run(&ctd, rt, &id, &spec);
        assert!(out.success(), "{id}: {out:?}");
        let l: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            l,
            [LIMIT.to_string().as_str(), "mine"],
            "{id}:\n{}",
            out.stdout
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
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
        if !userns {
            set_annotation(&mut spec, "rund.io/userns", "host");
        }
        let out = run(&ctd, rt, &id, &spec);
        assert!(out.success(), "{id}: {out:?}");
        assert_eq!(out.stdout.lines().collect::<Vec<_>>(), want, "{id}");
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
