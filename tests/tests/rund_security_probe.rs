//! Hostile probes against a running rund pod, with the `rund-probe` helper (src/bin):
//! an unprivileged host user and a host-network container try every unix socket of the pod's
//! shim and agent, and a workload holding CAP_SYS_PTRACE goes for rund-init, its PID 1.
//!
//! Each socket probe carries its own positive control: the test binds an abstract listener in
//! the host network namespace (what the agent must never have) and the same probe run must
//! connect to it, so a probe that cannot see or reach a listener fails the test instead of
//! passing it. From the host side, no socket of the pod listens in any network namespace (the
//! agent's own included) but the shim's path socket for containerd.
//!
//! The ptrace probe: in a remapped pod attach and /proc/1/mem are refused; without a user
//! namespace the kernel lets CAP_SYS_PTRACE attach (see the test), and what is checked is that
//! the init holds nothing the workload lacks.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rund_tests::ocispec::{set_annotation, ConfigRun};
use rund_tests::userns::{userns_test, COUNT};
use rund_tests::{assert_no_leaks_within, Containerd, ContainerdOpts, LeakSnapshot, RUND_RUNTIME};
use serde_json::{json, Value};

const GRACE: Duration = Duration::from_secs(15);
const NOBODY: u32 = 65534;
/// `/proc/net/unix` flags of a listening socket (`__SO_ACCEPTCON`).
const LISTENING: &str = "00010000";

fn start(test: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, ContainerdOpts::new())
}

/// The probe, copied where any user can run it (the target dir may not be).
fn probe_copy(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.join("rund-probe");
    std::fs::copy(env!("CARGO_BIN_EXE_rund-probe"), &p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The abstract listener that stands for a leaked control socket, and its inode.
fn decoy() -> (UnixListener, String) {
    let name = format!("rund-probe-decoy-{}", std::process::id());
    let l =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    let inode = link.to_string_lossy();
    let inode = inode
        .strip_prefix("socket:[")
        .and_then(|s| s.strip_suffix(']'))
        .unwrap()
        .to_string();
    (l, inode)
}

/// Inodes of the sockets `pid` holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let s = l.to_string_lossy().into_owned();
            Some(s.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect()
}

/// One `sock INODE NAME FLAGS RESULT` line of the probe.
#[derive(Debug)]
struct Sock {
    inode: String,
    name: String,
    flags: String,
    result: String,
}

fn parse_sockets(stdout: &str) -> Vec<Sock> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && f[0] == "sock").then(|| Sock {
                inode: f[1].into(),
                name: f[2].into(),
                flags: f[3].into(),
                result: f[4].into(),
            })
        })
        .collect()
}

/// One unix socket of the pod as its holder's network namespace lists it.
#[derive(Debug, Clone)]
struct PodSock {
    pid: u32,
    inode: String,
    name: String,
    flags: String,
}

/// The unix sockets `pids` hold, each from `/proc/<pid>/net/unix` (its own network namespace:
/// the agent's may differ from the host's). Other socket kinds (netlink, inet) are left out.
fn pod_sockets(pids: &[u32]) -> Vec<PodSock> {
    let host = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    let mut out = Vec::new();
    for &pid in pids {
        let mine = socket_inodes(pid);
        // A socket is listed in the network namespace it was made in: an agent launched ahead
        // of its pod (head start, warm) made its sockets in the host's, then joined the pod's.
        let own = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap();
        for l in own.lines().skip(1).chain(host.lines().skip(1)) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 7 {
                continue;
            }
            let listed = out
                .iter()
                .any(|s: &PodSock| s.pid == pid && s.inode == f[6]);
            if mine.iter().any(|i| i == f[6]) && !listed {
                out.push(PodSock {
                    pid,
                    inode: f[6].into(),
                    name: f.get(7).copied().unwrap_or("").into(),
                    flags: f[3].into(),
                });
            }
        }
    }
    out
}

/// From the host: nothing of the pod listens, in any network namespace, but the shim's path
/// socket for containerd; returns the inodes the host's network namespace lists (what a probe
/// there must find).
fn assert_only_the_shim_listens(socks: &[PodSock], shim: u32) -> Vec<String> {
    assert!(!socks.is_empty(), "the pod holds unix sockets");
    for s in socks.iter().filter(|s| s.flags == LISTENING) {
        assert!(
            s.pid == shim && s.name.starts_with("/run/containerd/s/"),
            "only the shim's containerd socket may listen: {s:?} of {socks:?}"
        );
    }
    let host = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    let host: Vec<&str> = host
        .lines()
        .filter_map(|l| l.split_whitespace().nth(6))
        .collect();
    // Elsewhere an abstract name is out of reach, but a path is not.
    for s in socks.iter().filter(|s| !host.contains(&s.inode.as_str())) {
        assert!(
            s.name.is_empty() || s.name.starts_with('@'),
            "{s:?} is a path socket in another network namespace"
        );
    }
    socks
        .iter()
        .filter(|s| host.contains(&s.inode.as_str()))
        .map(|s| s.inode.clone())
        .collect()
}

/// What every socket probe must show: the decoy was found and reached (the probe works), every
/// socket of the pod in its network namespace was found, and nothing but the decoy accepted a
/// connection, by its listed name or by rund's old `@rund-agent-<shim>-<n>` names.
fn assert_nothing_reachable(stdout: &str, decoy: &str, pod: &[String]) {
    let socks = parse_sockets(stdout);
    let d = socks.iter().find(|s| s.inode == decoy);
    assert!(
        d.is_some_and(|d| d.result == "connected" && d.flags == LISTENING),
        "the probe must find and reach the decoy listener {decoy}: {stdout}"
    );
    for inode in pod {
        assert!(
            socks.iter().any(|s| &s.inode == inode),
            "socket {inode} of the pod is not in the probe's /proc/net/unix: {stdout}"
        );
    }
    for s in socks.iter().filter(|s| s.inode != decoy) {
        assert_ne!(
            s.result, "connected",
            "{} (inode {}) accepted a connection: {stdout}",
            s.name, s.inode
        );
    }
    let names: Vec<&str> = stdout.lines().filter(|l| l.starts_with("name ")).collect();
    assert_eq!(names.len(), 8, "{stdout}");
    for l in names {
        assert!(!l.ends_with(" connected"), "{l}");
    }
}

#[test]
fn no_control_socket_for_an_unprivileged_host_user() {
    let Some(ctd) = start("no_control_socket_for_an_unprivileged_host_user") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let (agent, shim) = rund_tests::victim::start(&ctd, &rootfs);
    let socks = pod_sockets(&[agent, shim]);
    assert!(
        socks.iter().any(|s| s.pid == agent),
        "the agent holds its socketpair"
    );
    let pod = assert_only_the_shim_listens(&socks, shim);
    let (_decoy, decoy_inode) = decoy();
    let dir = tempfile::tempdir().unwrap();
    let probe = probe_copy(dir.path());
    let out = std::process::Command::new(&probe)
        .arg("sockets")
        .args(["--shim", &shim.to_string()])
        .args(&pod)
        .arg(&decoy_inode)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout.lines().next(),
        Some(format!("uid {NOBODY} {NOBODY}").as_str()),
        "the probe must run as nobody: {stdout}"
    );
    assert_nothing_reachable(&stdout, &decoy_inode, &pod);
    rund_tests::victim::remove(&ctd);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// The host's dynamic loader and its library dir: the probe is not static, so a busybox
/// container runs it through them, bound read-only.
fn host_loader() -> (PathBuf, PathBuf) {
    let ld = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2").unwrap();
    let dir = ld.parent().unwrap().to_path_buf();
    (ld, dir)
}

/// A spec running the probe in `rootfs` with `args`: the probe at /probe, the host's
/// libraries at /hostlib.
fn probe_spec(ctd: &Containerd, id: &str, rootfs: &Path, probe: &Path, args: &[&str]) -> Value {
    let (ld, libs) = host_loader();
    let ld = format!("/hostlib/{}", ld.file_name().unwrap().to_string_lossy());
    let mut argv = vec![ld.as_str(), "--library-path", "/hostlib", "/probe"];
    argv.extend_from_slice(args);
    let mut spec = ctd.oci_spec(id, rootfs, &argv).unwrap();
    let bind = |src: &Path, dst: &str| {
        json!({"destination": dst, "type": "bind", "source": src.display().to_string(),
               "options": ["rbind", "ro"]})
    };
    let mounts = spec["mounts"].as_array_mut().unwrap();
    mounts.push(bind(&libs, "/hostlib"));
    mounts.push(bind(probe, "/probe"));
    std::fs::create_dir_all(rootfs.join("hostlib")).unwrap();
    std::fs::write(rootfs.join("probe"), b"").unwrap();
    spec
}

fn run(ctd: &Containerd, id: &str, spec: &Value) -> rund_tests::CmdOutput {
    let opts = ConfigRun {
        runtime: Some(RUND_RUNTIME.to_string()),
        ..Default::default()
    };
    ctd.run_config(id, spec, &opts).unwrap()
}

#[test]
fn no_control_socket_from_a_host_network_container() {
    let Some(ctd) = start("no_control_socket_from_a_host_network_container") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let (agent, shim) = rund_tests::victim::start(&ctd, &rootfs);
    let pod = assert_only_the_shim_listens(&pod_sockets(&[agent, shim]), shim);
    let (_decoy, decoy_inode) = decoy();
    let dir = tempfile::tempdir().unwrap();
    let probe = probe_copy(dir.path());
    let shim_pid = shim.to_string();
    let mut args = vec!["sockets", "--shim", shim_pid.as_str()];
    args.extend(pod.iter().map(String::as_str));
    args.push(&decoy_inode);
    let mut spec = probe_spec(&ctd, "hostnet", &rootfs, &probe, &args);
    // No network namespace: the container shares the host's (ctr run --net-host).
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network");
    let out = run(&ctd, "hostnet", &spec);
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.starts_with("uid 0 0"), "{out:?}");
    assert_nothing_reachable(&out.stdout, &decoy_inode, &pod);
    rund_tests::victim::remove(&ctd);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// `status <who> <key> <value>` of the probe, as a number for the Cap* keys.
fn status(stdout: &str, who: &str, key: &str) -> String {
    stdout
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[0] == "status" && f[1] == who && f[2] == key)
                .then(|| f[3..].join(" "))
        })
        .unwrap_or_else(|| panic!("no {key} of {who}: {stdout}"))
}

fn cap(stdout: &str, who: &str, key: &str) -> u64 {
    u64::from_str_radix(&status(stdout, who, key), 16).unwrap()
}

const CAP_KILL: u64 = 1 << 5;
const CAP_SYS_PTRACE: u64 = 1 << 19;

/// A container whose workload holds CAP_SYS_PTRACE (ctr run --cap-add CAP_SYS_PTRACE), has a
/// seccomp filter (mkdir denied) and runs under rund-init; the workload probes PID 1.
fn tracer_spec(ctd: &Containerd, id: &str, rootfs: &Path, probe: &Path) -> Value {
    let mut spec = probe_spec(ctd, id, rootfs, probe, &["ptrace", "1"]);
    set_annotation(&mut spec, "rund.io/init", "true");
    for set in ["bounding", "effective", "permitted"] {
        spec["process"]["capabilities"][set]
            .as_array_mut()
            .unwrap()
            .push(json!("CAP_SYS_PTRACE"));
    }
    spec["linux"]["seccomp"] = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]
    });
    spec
}

/// What the init may hold, whatever can reach it: at most CAP_KILL (to signal a workload that
/// changed its uid), no ambient set, a bounding set within the workload's, no_new_privs, and
/// the workload's own seccomp filter (the workload inherits the init's, so equal counts mean
/// the very same filters).
fn assert_init_holds_nothing_more(s: &str) {
    assert_eq!(
        status(s, "1", "Name"),
        "memfd:rund-init",
        "PID 1 is rund-init: {s}"
    );
    let own = cap(s, "self", "CapEff");
    assert_ne!(
        own & CAP_SYS_PTRACE,
        0,
        "the workload holds CAP_SYS_PTRACE: {s}"
    );
    for k in ["CapEff", "CapPrm"] {
        let init = cap(s, "1", k);
        assert_eq!(init & !CAP_KILL, 0, "init {k} {init:x}: {s}");
        assert_eq!(
            init & !cap(s, "self", k),
            0,
            "init {k} not within the workload's: {s}"
        );
    }
    assert_eq!(cap(s, "1", "CapInh") | cap(s, "1", "CapAmb"), 0, "{s}");
    assert_eq!(cap(s, "1", "CapBnd") & !cap(s, "self", "CapBnd"), 0, "{s}");
    assert_eq!(status(s, "1", "NoNewPrivs"), "1", "{s}");
    assert_eq!(
        status(s, "1", "Seccomp"),
        "2",
        "the init runs under the filter: {s}"
    );
    assert_eq!(
        status(s, "1", "Seccomp_filters"),
        status(s, "self", "Seccomp_filters"),
        "{s}"
    );
}

/// Without a user namespace the workload's CAP_SYS_PTRACE is held in the init's own user
/// namespace, where it overrides non-dumpable and the capability-subset rule: the kernel lets
/// it attach to any process of its pid namespace, rund-init included (as with runc and any
/// init such as tini). What rund guarantees there is that the init holds nothing the workload
/// lacks, so taking it over gains nothing.
#[test]
fn rund_init_holds_nothing_a_ptrace_capable_workload_lacks() {
    let Some(ctd) = start("rund_init_holds_nothing_a_ptrace_capable_workload_lacks") else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    let dir = tempfile::tempdir().unwrap();
    let probe = probe_copy(dir.path());
    let spec = tracer_spec(&ctd, "tracer", &rootfs, &probe);
    let out = run(&ctd, "tracer", &spec);
    assert!(out.success(), "{out:?}");
    assert_init_holds_nothing_more(&out.stdout);
    assert_no_leaks_within(&ctd, &before, GRACE);
}

/// In a remapped pod the workload's CAP_SYS_PTRACE is held in the pod's user namespace only;
/// rund-init runs from a sealed memfd owned by host root, which the pod does not map, so the
/// kernel ties the init's mm to the host's user namespace: ptrace attach and /proc/1/mem are
/// refused.
#[test]
fn a_ptrace_capable_workload_in_a_user_namespace_cannot_attach_to_rund_init() {
    let test = "a_ptrace_capable_workload_in_a_user_namespace_cannot_attach_to_rund_init";
    userns_test(test, COUNT, |env, _| {
        let dir = tempfile::tempdir().unwrap();
        let probe = probe_copy(dir.path());
        let spec = tracer_spec(&env.ctd, "tracer", &env.rootfs, &probe);
        let out = env.run_config("tracer", &spec);
        assert!(out.success(), "{out:?}");
        let s = &out.stdout;
        assert_init_holds_nothing_more(s);
        assert_eq!(
            s.lines().find(|l| l.starts_with("mem ")),
            Some(format!("mem refused:{}", libc::EACCES).as_str()),
            "/proc/1/mem must not open: {s}"
        );
        assert_eq!(
            s.lines().find(|l| l.starts_with("attach ")),
            Some(format!("attach refused:{}", libc::EPERM).as_str()),
            "ptrace attach to PID 1 must fail with EPERM: {s}"
        );
    });
}
