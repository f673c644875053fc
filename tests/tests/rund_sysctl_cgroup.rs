//! Container sysctls and the container's view of its cgroup, through ctr with hand-made specs,
//! runc (the reference) and rund side by side: sysctls are set before /proc/sys turns
//! read-only and bad keys fail at Create; /sys/fs/cgroup shows only the container's own cgroup
//! (v1 here; the v2 test runs only on a pure v2 host, i.e. the VM suite).

use std::time::Duration;

use rund_tests::fsview::*;
use rund_tests::ocispec::set_annotation;
use rund_tests::{assert_no_leaks_within, Containerd, LeakSnapshot, RUNC_RUNTIME, RUND_RUNTIME};
use serde_json::{json, Value};

#[test]
fn container_sysctls_are_set_before_proc_sys_turns_read_only() {
    let Some(ctd) = start("container_sysctls_are_set_before_proc_sys_turns_read_only") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let script = "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmax \
                  /proc/sys/net/ipv4/ping_group_range; \
                  if echo 0 > /proc/sys/kernel/shm_rmid_forced; then echo writable; else echo read-only; fi";
    // rund twice: in a user namespace (asked for with `rund.io/userns: pod`, which runc
    // ignores) and without.
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
        if userns {
            set_annotation(&mut spec, "rund.io/userns", "pod");
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
    if userns {
        set_annotation(&mut spec, "rund.io/userns", "pod");
    }
    spec
}

#[test]
fn cgroup_v1_shows_only_the_containers_own_cgroup() {
    if cgroup2_host() {
        rund_tests::skip!("a pure cgroup v2 host");
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
        rund_tests::skip!("needs a pure cgroup v2 host (the VM suite runs it)");
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
