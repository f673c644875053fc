//! Best-effort clean-up after containerd stopped: only things that provably belong to this
//! instance (its dir, its namespace's cgroups).

use std::time::{Duration, Instant};

use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{Containerd, KEEP_ENV};
use crate::leaks;

pub(super) fn after_stop(c: &Containerd) {
    kill_leftovers(c);
    unmount_under(&c.dir);
    leaks::remove_cgroups(&c.cgroup_roots());
    if std::env::var(KEEP_ENV).as_deref() == Ok("1") {
        eprintln!("{KEEP_ENV}=1: keeping {}", c.dir.display());
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(&c.dir) {
        eprintln!("rund-tests: could not remove {}: {e}", c.dir.display());
    }
}

/// Shims and agents survive containerd; they reference our dir in their command line (or descend
/// from something that does), so we started them. The shims get SIGTERM first (a lingering node
/// shim then removes its control socket and lock file from /run/containerd/s, which a SIGKILL
/// would leave behind), then whatever is left gets SIGKILL, all by pid.
fn kill_leftovers(c: &Containerd) {
    let owned = || leaks::owned_processes(&c.watch_prefixes(), &c.cgroup_roots(), None);
    let shims = |procs: &[leaks::ProcInfo]| -> Vec<u32> {
        procs
            .iter()
            .filter(|p| leaks::is_shim_argv(p))
            .map(|p| p.pid)
            .collect()
    };
    let terminated = shims(&owned());
    for &pid in &terminated {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while !terminated.is_empty() && Instant::now() < deadline {
        let left = shims(&owned());
        if !terminated.iter().any(|p| left.contains(p)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = owned();
        if procs.is_empty() || Instant::now() >= deadline {
            return;
        }
        for p in procs {
            let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lazily unmount every mount point under `dir`, deepest first.
pub(crate) fn unmount_under(dir: &std::path::Path) {
    for _ in 0..3 {
        let mut points = leaks::mount_points_under(&[dir.to_path_buf()]);
        if points.is_empty() {
            return;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
        for p in points {
            let _ = umount2(&p, MntFlags::MNT_DETACH);
        }
    }
}
