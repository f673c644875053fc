//! Helpers for the per-node shim's tests (`[shim] mode = "per-node"`): the node's process,
//! its control socket, and pods run and removed through ctr.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::{Containerd, ContainerdOpts, RunSpec};

pub const RUND: &str = "io.containerd.rund.v2";
/// The node's linger (2 s) plus containerd's own cleanup.
pub const GRACE: Duration = Duration::from_secs(20);

pub fn per_node(opts: ContainerdOpts) -> ContainerdOpts {
    per_node_with(opts, "")
}

/// Per-node mode with more of rund's config (`[sandbox] warm`, say).
pub fn per_node_with(opts: ContainerdOpts, more: &str) -> ContainerdOpts {
    ContainerdOpts {
        rund_config: Some(format!("[shim]\nmode = \"per-node\"\n{more}")),
        ..opts
    }
}

pub fn start(test: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, per_node(ContainerdOpts::new()))
}

pub fn config_flags(ctd: &Containerd) -> Vec<String> {
    let cfg = ctd.opts.rund_config_path.as_ref().expect("a rund config");
    vec!["--runtime-config-path".into(), cfg.display().to_string()]
}

pub fn spec(ctd: &Containerd, id: &str, rootfs: &Path, args: &[&str]) -> RunSpec {
    RunSpec {
        id: id.into(),
        rootfs: Some(rootfs.into()),
        args: args.iter().map(|a| a.to_string()).collect(),
        flags: config_flags(ctd),
        ..RunSpec::new(RUND)
    }
}

pub fn run_detached(ctd: &Containerd, id: &str, rootfs: &Path) {
    let out = ctd
        .run_spec(&RunSpec {
            detach: true,
            ..spec(ctd, id, rootfs, &["sleep", "100000"])
        })
        .unwrap();
    assert!(out.success(), "{id}: {out:?}");
}

pub fn ppid_and_comm(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// The nearest `containerd-shim*` ancestor of `pid`.
pub fn shim_of(pid: u32) -> Option<u32> {
    let mut p = pid;
    for _ in 0..16 {
        let (ppid, comm) = ppid_and_comm(p)?;
        if comm.starts_with("containerd-shim") {
            return Some(p);
        }
        p = ppid;
    }
    None
}

pub fn task_pid(ctd: &Containerd, id: &str) -> u32 {
    let out = ctd.ctr(&["task", "ls"]).unwrap();
    out.stdout
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&id) && f.get(2) == Some(&"RUNNING")).then(|| f[1].parse().ok())?
        })
        .unwrap_or_else(|| panic!("{id} is not RUNNING: {}", out.stdout))
}

pub fn remove(ctd: &Containerd, id: &str) {
    let _ = ctd.ctr(&["task", "kill", "-s", "KILL", id]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let out = ctd.ctr(&["task", "rm", id]).unwrap();
        if out.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ctd.ctr(&["container", "rm", id]).unwrap().success(), "{id}");
}

/// The node's control socket: containerd's socket hash of
/// `<address>/<ns>/rund node <config path>` (the config ctr passes as runtime options).
pub fn control_socket(ctd: &Containerd) -> PathBuf {
    let cfg = ctd.opts.rund_config_path.as_ref().expect("a rund config");
    socket_of(ctd, &format!("rund node {}", cfg.display()))
}

/// The node's control socket and lock file are gone.
pub fn assert_node_files_gone(ctd: &Containerd) {
    let control = control_socket(ctd);
    assert!(!control.exists(), "{} (control) is left", control.display());
    let lock = PathBuf::from(format!("{}.lock", control.display()));
    assert!(!lock.exists(), "{} is left", lock.display());
}

/// The socket the node serves pod `id` on: containerd's hash of `<address>/<ns>/<id>`.
pub fn pod_socket(ctd: &Containerd, id: &str) -> PathBuf {
    socket_of(ctd, id)
}

fn socket_of(ctd: &Containerd, key: &str) -> PathBuf {
    let key = format!("{}/{}/{key}", ctd.address().display(), ctd.namespace);
    let hex: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    PathBuf::from(format!("/run/containerd/s/{hex}"))
}

pub fn alive(pid: u32) -> bool {
    ppid_and_comm(pid).is_some()
}

/// `pid`'s state and parent, for a failure message ("Z (zombie)": it ended
/// and nobody reaped it).
pub fn describe(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or("?")
            .to_string()
    };
    format!(
        "pid {pid}: {}, state {}, parent {}",
        field("Name:"),
        field("State:"),
        field("PPid:")
    )
}

/// Whether `pid` has ended and waits to be reaped.
pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}

pub fn gone_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    !alive(pid)
}

/// Pids of `parent`'s children whose command name is `comm`.
pub fn children_named(parent: u32, comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| ppid_and_comm(pid).is_some_and(|(pp, c)| pp == parent && c == comm))
        .collect()
}

/// `parent`'s children that are rund agents: named `rund-agent` and PID 1 of
/// a pid namespace of their own. A launcher runs under the same name in the
/// node's namespace, and is gone once it has handed its agent over.
pub fn agents_of(parent: u32) -> Vec<u32> {
    children_named(parent, "rund-agent")
        .into_iter()
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .is_some_and(|ids| {
                        let ids: Vec<&str> = ids.split_whitespace().collect();
                        ids.len() > 1 && ids.last() == Some(&"1")
                    })
            })
        })
        .collect()
}

/// The node's log (`<state_dir>/node-<hash>.log`; the harness's state_dir is
/// `<dir>/rund-state`).
pub fn node_log(ctd: &Containerd) -> String {
    node_logs_in(&ctd.dir.join("rund-state"))
}

/// Every node log under rund's `state_dir`, one after another.
pub fn node_logs_in(state_dir: &Path) -> String {
    std::fs::read_dir(state_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("node-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

/// Whether a node's `log` says sandbox `id` claimed a warm agent.
pub fn claimed_warm(log: &str, id: &str) -> bool {
    claimed_warm_pid(log, id).is_some()
}

/// The pid of the warm agent that sandbox `id` claimed, from the node's `log`.
pub fn claimed_warm_pid(log: &str, id: &str) -> Option<u32> {
    let needle = format!("sandbox={id} ");
    log.lines()
        .filter(|l| l.contains("claiming a warm agent") && l.contains(&needle))
        .find_map(|l| {
            l.split_once(" pid=")?
                .1
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

/// How many warm agents the node's `log` says it launched.
pub fn warm_launched(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("warm agent ready"))
        .count()
}

/// SIGKILL, by pid.
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

pub fn kill9(pid: u32) {
    signal(pid, nix::sys::signal::Signal::SIGKILL);
}

/// The keeper's new node shim (not `old`), within [`GRACE`]. The agents of the dead one are
/// now the keeper's children, so the shim is found below the keeper, not above the task.
pub fn new_node(keeper: u32, old: u32) -> Option<u32> {
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if let Some(n) = children_named(keeper, "containerd-shim")
            .into_iter()
            .find(|&n| n != old)
        {
            return Some(n);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
