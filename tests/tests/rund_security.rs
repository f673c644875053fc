//! Security semantics, each against runc (the reference) and rund in one containerd:
//! no control socket anyone can reach, capability and seccomp semantics exactly as runc
//! applies them, and the OCI hooks at their points with the state they must see.

use std::path::Path;

use rund_tests::ocispec::ConfigRun;
use rund_tests::{
    assert_no_leaks_within, Containerd, ContainerdOpts, LeakSnapshot, RUNC_RUNTIME, RUND_RUNTIME,
};
use serde_json::{json, Value};

const GRACE: std::time::Duration = std::time::Duration::from_secs(15);

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_under_test(test, ContainerdOpts::new().with_runc())
}

fn runtimes() -> [&'static str; 2] {
    [RUNC_RUNTIME, RUND_RUNTIME]
}

fn short(rt: &str) -> &'static str {
    if rt == RUNC_RUNTIME {
        "runc"
    } else {
        "rund"
    }
}

fn run(ctd: &Containerd, id: &str, spec: &Value, rt: &str) -> rund_tests::CmdOutput {
    let opts = ConfigRun {
        runtime: Some(rt.to_string()),
        ..Default::default()
    };
    ctd.run_config(id, spec, &opts).unwrap()
}

/// (CapInh, CapPrm, CapEff, CapBnd, CapAmb) from a /proc/self/status dump.
fn caps(status: &str) -> Vec<(String, u64)> {
    status
        .lines()
        .filter(|l| l.starts_with("Cap"))
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), u64::from_str_radix(v.trim(), 16).ok()?))
        })
        .collect()
}

#[test]
fn no_control_socket_is_reachable() {
    let Some(ctd) = start("no_control_socket_is_reachable") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let (agent, shim) = rund_tests::victim::start(&ctd, &rootfs);
    // Every socket the agent holds is unnamed (a socketpair end): nothing to find in
    // /proc/net/unix, nothing to connect to. The shim's only named socket is the
    // one containerd connects to.
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let named = |pid: u32| -> Vec<String> {
        let inodes = socket_inodes(pid);
        table
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 7 && inodes.contains(&f[6].to_string())
            })
            .map(|l| l.split_whitespace().nth(7).unwrap_or_default().to_string())
            .collect()
    };
    assert!(
        !socket_inodes(agent).is_empty(),
        "the agent holds its socketpair"
    );
    assert_eq!(
        named(agent),
        Vec::<String>::new(),
        "agent {agent} has named sockets"
    );
    let shim_named = named(shim);
    assert!(
        shim_named
            .iter()
            .all(|n| n.starts_with("/run/containerd/s/")),
        "shim {shim} names: {shim_named:?}"
    );
    // The agent runs from a read-only mount of its binary: nothing that reaches
    // /proc/<agent>/exe can write the host's rund-agent (runc's CVE-2019-5736).
    let exe = std::ffi::CString::new(format!("/proc/{agent}/exe")).unwrap();
    // SAFETY: statvfs fills the struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(exe.as_ptr(), &mut st) }, 0);
    assert_ne!(
        st.f_flag & libc::ST_RDONLY,
        0,
        "the agent's binary is on a writable mount"
    );
    // The name the agent used to listen on answers nobody.
    for n in 0..4 {
        let name = format!("rund-agent-{shim}-{n}");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        assert!(
            std::os::unix::net::UnixStream::connect_addr(&addr).is_err(),
            "@{name} accepted a connection"
        );
    }
    rund_tests::victim::remove(&ctd);
}

use std::os::linux::net::SocketAddrExt;

/// Inodes of the sockets `pid` holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let s = l.to_string_lossy().into_owned();
                    Some(s.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn absent_capabilities_mean_none() {
    let Some(ctd) = start("absent_capabilities_mean_none") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    // No process.capabilities at all, empty sets (ALL dropped, as containerd leaves
    // them out), then a bounding set alone: rund must give exactly what runc gives.
    let cases = [
        None,
        Some(json!({})),
        Some(json!({"bounding": ["CAP_KILL"]})),
    ];
    for (n, c) in cases.iter().enumerate() {
        let mut seen = Vec::new();
        for rt in runtimes() {
            let id = format!("caps-{}-{n}", short(rt));
            let mut spec = ctd
                .oci_spec(&id, &rootfs, &["cat", "/proc/self/status"])
                .unwrap();
            match c {
                None => {
                    spec["process"]
                        .as_object_mut()
                        .unwrap()
                        .remove("capabilities");
                }
                Some(c) => spec["process"]["capabilities"] = c.clone(),
            }
            let out = run(&ctd, &id, &spec, rt);
            assert!(out.success(), "{rt}: {out:?}");
            let got = caps(&out.stdout);
            assert_eq!(got.len(), 5, "{rt}: {}", out.stdout);
            seen.push(got);
        }
        assert_eq!(
            seen[1], seen[0],
            "case {n}: rund (right) must match runc (left)"
        );
        if n < 2 {
            assert!(
                seen[1].iter().all(|(_, v)| *v == 0),
                "case {n}: {:?}",
                seen[1]
            );
        }
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

#[test]
fn seccomp_without_no_new_privs_is_loaded_before_the_capability_drop() {
    let Some(ctd) = start("seccomp_without_no_new_privs") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    for rt in runtimes() {
        let id = format!("sc-{}", short(rt));
        let script = "grep Seccomp: /proc/self/status; mkdir /tmp/denied; echo rc=$?";
        let mut spec = ctd.oci_spec(&id, &rootfs, &["sh", "-c", script]).unwrap();
        spec["process"]["noNewPrivileges"] = json!(false);
        spec["process"]["capabilities"] = json!({
            "bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]
        });
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]
        });
        let out = run(&ctd, &id, &spec, rt);
        assert!(out.success(), "{rt}: {out:?}");
        assert!(out.stdout.contains("Seccomp:\t2"), "{rt}: {out:?}");
        assert!(
            out.stdout.contains("rc=1"),
            "{rt}: mkdir must fail: {out:?}"
        );
        assert!(
            out.stderr.contains("Operation not permitted"),
            "{rt}: {out:?}"
        );
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// A hook that appends its name to `order` and saves its state JSON.
fn hook(dir: &Path, name: &str, extra: &str) -> Value {
    let d = dir.display();
    json!({"path": "/bin/sh", "args": ["sh", "-c",
        format!("echo {name} >> {d}/order; cat > {d}/{name}.json{extra}")]})
}

#[test]
fn hooks_run_at_their_points_with_the_state() {
    let Some(ctd) = start("hooks_run_at_their_points") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    for rt in runtimes() {
        let dir = ctd.dir.join(format!("hooks-{}", short(rt)));
        std::fs::create_dir_all(&dir).unwrap();
        let id = format!("hk-{}", short(rt));
        let mut spec = ctd
            .oci_spec(&id, &rootfs, &["sh", "-c", "cat /tmp/start.json"])
            .unwrap();
        let mut h = serde_json::Map::new();
        for kind in [
            "prestart",
            "createRuntime",
            "createContainer",
            "poststart",
            "poststop",
        ] {
            h.insert(kind.into(), json!([hook(&dir, kind, "")]));
        }
        // startContainer runs inside the container: its path and files are the container's.
        h.insert(
            "startContainer".into(),
            json!([{"path": "/bin/sh", "args": ["sh", "-c", "cat > /tmp/start.json"]}]),
        );
        spec["hooks"] = Value::Object(h);
        let out = run(&ctd, &id, &spec, rt);
        assert!(out.success(), "{rt}: {out:?}");
        let order = std::fs::read_to_string(dir.join("order")).unwrap();
        let order: Vec<&str> = order.lines().collect();
        assert_eq!(
            order,
            [
                "prestart",
                "createRuntime",
                "createContainer",
                "poststart",
                "poststop"
            ],
            "{rt}"
        );
        let state = |k: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{k}.json"))).unwrap())
                .unwrap()
        };
        let created = state("createRuntime");
        assert_eq!(created["id"], id.as_str(), "{rt}: {created}");
        assert!(
            created["pid"].as_u64().unwrap_or(0) > 1,
            "{rt}: host pid: {created}"
        );
        let bundle = created["bundle"].as_str().unwrap_or_default();
        assert!(
            bundle.starts_with(&ctd.dir.display().to_string()) && bundle.ends_with(&id),
            "{rt}: bundle: {created}"
        );
        // runc runs createContainer hooks inside the container (they see its pid 1);
        // rund runs them in the runtime namespace, where the host pid is the one that works.
        if rt == RUND_RUNTIME {
            assert_eq!(state("createContainer")["pid"], created["pid"], "{rt}");
        }
        assert_eq!(state("poststart")["pid"], created["pid"], "{rt}");
        // The startContainer hook saw the state too (printed by the workload).
        let start: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        assert_eq!(start["id"], id.as_str(), "{rt}: {out:?}");
        assert_eq!(start["bundle"], created["bundle"], "{rt}: {out:?}");
    }
    // A failing hook fails its step and leaves nothing behind; a failing poststop is only
    // logged. Each kind as runc does it.
    let failing = json!([{"path": "/bin/sh", "args": ["sh", "-c", "echo no >&2; exit 3"]}]);
    for (kind, fails) in [
        ("prestart", true),
        ("createRuntime", true),
        ("createContainer", true),
        ("startContainer", true),
        ("poststart", true),
        ("poststop", false),
    ] {
        for rt in runtimes() {
            let id = format!("hkf-{}-{}", kind.to_lowercase(), short(rt));
            let mut spec = ctd.oci_spec(&id, &rootfs, &["true"]).unwrap();
            spec["hooks"] = json!({ kind: failing });
            let out = run(&ctd, &id, &spec, rt);
            assert_eq!(
                !out.success(),
                fails,
                "{rt}: a failing {kind} hook (fails the step: {fails}): {out:?}"
            );
            let _ = ctd.container_delete(&id);
        }
    }
    assert_no_leaks_within(&ctd, &before, GRACE);
}
