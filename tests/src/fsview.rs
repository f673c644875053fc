//! Helpers for the container-filesystem tests: runc and rund side by side in one private
//! containerd (`ctr run --config` with hand-made specs), and shared host volumes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::ocispec::ConfigRun;
use crate::{CmdOutput, Containerd, ContainerdOpts, RUNC_RUNTIME, RUND_RUNTIME};

/// runc (the reference) first, then rund.
pub const BOTH: [&str; 2] = [RUNC_RUNTIME, RUND_RUNTIME];
const WAIT: Duration = Duration::from_secs(60);

/// A private containerd with rund and, for reference runs, runc.
pub fn start(test: &str) -> Option<Containerd> {
    Containerd::start_rund_or_skip(test, ContainerdOpts::new().with_runc())
}

/// "runc" or "rund", for container ids.
pub fn short(runtime: &str) -> &'static str {
    if runtime == RUNC_RUNTIME {
        "runc"
    } else {
        "rund"
    }
}

/// `ctr run --rm --config` with `runtime`; the output whatever the exit status.
pub fn run(ctd: &Containerd, runtime: &str, id: &str, spec: &Value) -> CmdOutput {
    let opts = ConfigRun {
        runtime: Some(runtime.into()),
        ..ConfigRun::default()
    };
    ctd.run_config(id, spec, &opts).unwrap()
}

/// [`run`], for output that must equal `want`. A reference (runc) run whose output came back
/// cut short of `want` is run once more: `ctr run --rm` on containerd 1.6 now and then loses a
/// short-lived runc container's last lines (ci57 lost two of fifteen). rund's output is never
/// run again.
pub fn run_for_lines(
    ctd: &Containerd,
    runtime: &str,
    id: &str,
    spec: &Value,
    want: &[&str],
) -> CmdOutput {
    let out = run(ctd, runtime, id, spec);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let cut_short = lines.len() < want.len() && want.starts_with(&lines);
    if runtime == RUNC_RUNTIME && out.success() && cut_short {
        eprintln!("{id}: runc's output was cut short ({lines:?}); running it again");
        return run(ctd, runtime, id, spec);
    }
    out
}

/// `ctr run -d --config` with `runtime`; panics unless the task started.
pub fn run_detached(ctd: &Containerd, runtime: &str, id: &str, spec: &Value) {
    let opts = ConfigRun {
        runtime: Some(runtime.into()),
        detach: true,
        ..ConfigRun::default()
    };
    let out = ctd.run_config(id, spec, &opts).unwrap();
    assert!(out.success(), "{id}: {out:?}\n{}", ctd.log_tail(30));
}

/// A spec running `sh -c script` on the instance's busybox rootfs.
pub fn sh(ctd: &Containerd, id: &str, script: &str) -> Value {
    let rootfs = ctd.busybox_rootfs().unwrap();
    ctd.oci_spec(id, &rootfs, &["sh", "-c", script]).unwrap()
}

pub fn add_mount(spec: &mut Value, m: Value) {
    spec["mounts"].as_array_mut().unwrap().push(m);
}

/// Adds `cap` to the bounding, effective and permitted sets.
pub fn add_cap(spec: &mut Value, cap: &str) {
    for set in ["bounding", "effective", "permitted"] {
        spec["process"]["capabilities"][set]
            .as_array_mut()
            .unwrap()
            .push(json!(cap));
    }
}

/// Mount points (field 5) of a mountinfo text.
pub fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .collect()
}

pub fn host_mount_points() -> Vec<String> {
    mount_points(&std::fs::read_to_string("/proc/self/mountinfo").unwrap())
}

/// Polls `f` (a failure detector, not a timing assertion: 60 s).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a host command; panics unless it succeeds.
pub fn host(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// A tmpfs at `path`, in a peer group of its own (shared), with empty `fromhost` and
/// `fromctr` dirs; unmounted (with what propagated into it) on drop.
pub struct SharedVol(pub PathBuf);

impl SharedVol {
    pub fn new(path: PathBuf) -> SharedVol {
        std::fs::create_dir_all(&path).unwrap();
        let p = path.to_str().unwrap();
        host(&["mount", "-t", "tmpfs", "rund-vol", p]);
        host(&["mount", "--make-shared", p]);
        for d in ["fromhost", "fromctr"] {
            std::fs::create_dir(path.join(d)).unwrap();
        }
        SharedVol(path)
    }

    /// Mounts a tmpfs at `fromhost` (after the container started, so only propagation can
    /// bring it in) and puts `flag` in it.
    pub fn mount_from_host(&self) {
        let from_host = self.0.join("fromhost");
        host(&["mount", "-t", "tmpfs", "host", from_host.to_str().unwrap()]);
        std::fs::write(from_host.join("flag"), "").unwrap();
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

/// The child cgroups of `<mount>/<rel>`: (visible, hidden) names, hidden ones starting with a
/// dot (the pool's slots and kept markers).
pub fn cgroup_children(mount: &Path, rel: &str) -> (Vec<String>, Vec<String>) {
    let mut seen: (Vec<String>, Vec<String>) = Default::default();
    for e in std::fs::read_dir(mount.join(rel)).unwrap().flatten() {
        if e.path().is_dir() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with('.') {
                seen.1.push(n);
            } else {
                seen.0.push(n);
            }
        }
    }
    seen
}

/// mkdir each level of `rel` under the v2 `mount`, enabling every controller the parent has in
/// the new level's subtree, as the kubelet's cgroupfs driver does for its QoS and pod cgroups.
pub fn make_cgroup_like_the_kubelet(mount: &Path, rel: &str) {
    let mut cur = mount.to_path_buf();
    for c in Path::new(rel).components() {
        let parent = cur.clone();
        cur.push(c);
        let available = std::fs::read_to_string(parent.join("cgroup.controllers")).unwrap();
        let enable: Vec<String> = available
            .split_whitespace()
            .map(|c| format!("+{c}"))
            .collect();
        // A controller the parent does not pass down cannot be enabled: write what it has.
        let _ = std::fs::write(parent.join("cgroup.subtree_control"), enable.join(" "));
        if !cur.exists() {
            std::fs::create_dir(&cur).unwrap_or_else(|e| panic!("mkdir {}: {e}", cur.display()));
        }
    }
}
