//! Root integration test: agents launched with the node's agent-root
//! template (`LaunchConfig::root_template`) start in a copy of it.

mod support;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rund_proto::launch::LaunchConfig;
use support::*;

/// Unmounts the test's pin however the test ends.
struct Pin(PathBuf);

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// (mount point, major:minor, fs type, mount options, super options) of each mount `pid` sees.
fn mounts_of(pid: i32) -> Vec<(String, String, String, String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-").unwrap();
            (
                f[4].to_string(),
                f[2].to_string(),
                f[sep + 1].to_string(),
                f[5].to_string(),
                f[sep + 3].to_string(),
            )
        })
        .collect()
}

fn is_pinned(pin: &Path) -> bool {
    std::fs::File::open(pin).is_ok_and(|f| rund_sys::ns::is_kind(f.as_fd(), "mnt"))
}

fn config(pin: &Path) -> LaunchConfig {
    LaunchConfig {
        sandbox_id: "tmpl".into(),
        new_net: true,
        new_ipc: true,
        new_uts: true,
        root_template: Some(pin.display().to_string()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn agents_start_in_copies_of_one_read_only_template() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pin = dir.path().join("agent-root.1");
    // A stale pin (an empty file, as a crash or a reboot leaves) is rebuilt.
    std::fs::write(&pin, b"").unwrap();
    let _pin = Pin(pin.clone());
    let (a, a_guard) = launch_agent(&config(&pin)).unwrap();
    assert!(is_pinned(&pin), "the first launch pins the template");

    let mounts = mounts_of(a_guard.0);
    let points: Vec<&str> = mounts.iter().map(|m| m.0.as_str()).collect();
    // The root, the bound /dev nodes, /proc and /sys: nothing of the host's.
    assert!(mounts.len() <= 10, "{mounts:?}");
    for want in ["/", "/proc", "/sys", "/dev/null", "/dev/urandom"] {
        assert!(points.contains(&want), "no {want}: {mounts:?}");
    }
    let root = mounts.iter().find(|m| m.0 == "/").unwrap();
    assert_eq!(root.2, "tmpfs", "{mounts:?}");
    assert!(
        root.4.split(',').any(|o| o == "ro"),
        "read-only superblock: {root:?}"
    );
    let ours = mounts_of(std::process::id() as i32);
    assert!(
        ours.len() > mounts.len(),
        "the host's table is larger: {ours:?}"
    );

    // A second agent enters the same template: its root is the same superblock.
    let (_b, b_guard) = launch_agent(&config(&pin)).unwrap();
    let b_root = mounts_of(b_guard.0)
        .into_iter()
        .find(|m| m.0 == "/")
        .unwrap();
    assert_eq!(b_root.1, root.1, "one superblock for every agent's root");

    // Containers still start in a templated agent.
    let (pid, out) = a.create("c1", "", spec(&["echo", "templated"])).await;
    pid.unwrap();
    a.start("c1", "").await;
    assert_eq!(a.wait("c1", "").await, 0);
    assert_eq!(read_all(out).trim(), "templated");
}

#[tokio::test(flavor = "current_thread")]
async fn a_pin_dir_others_may_write_is_refused_and_nothing_is_pinned() {
    if !can_run() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let pin = open.join("agent-root.1");
    let _pin = Pin(pin.clone());
    let e = launch_agent(&config(&pin))
        .err()
        .expect("a template in a world-writable dir is refused");
    assert!(e.contains("writable by root only"), "{e}");
    assert!(!pin.exists() && !is_pinned(&pin), "nothing pinned");
    // A launch with sysctls (written through the host's /proc) builds its own root.
    let legacy = LaunchConfig {
        sysctls: vec![("kernel.shm_rmid_forced".into(), "1".into())],
        ..config(&pin)
    };
    let (_sb, guard) = launch_agent(&legacy).unwrap();
    assert!(
        !is_pinned(&pin),
        "a launch with sysctls does not use the template"
    );
    let root = mounts_of(guard.0).into_iter().find(|m| m.0 == "/").unwrap();
    assert!(
        !root.4.split(',').any(|o| o == "ro"),
        "its own root: {root:?}"
    );
}
