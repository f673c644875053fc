use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use super::stash::{self, Msg};
use super::{seqpacket, watch, Ended, Kept};

const SCENARIO: &str = "RUND_KEEPER_ZOMBIE_SCENARIO";

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
        .unwrap_or(false)
}

/// A child that has ended (by `signal`, or exit 0) and not been reaped.
#[allow(clippy::zombie_processes)] // the zombie is the point: `watch` reaps it
fn dead_child(signal: Option<i32>) -> Pid {
    let prog = if signal.is_some() { "sleep" } else { "true" };
    let child = Command::new(prog)
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    if let Some(sig) = signal {
        // SAFETY: kill(2) on our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !zombie(pid) {
        assert!(Instant::now() < deadline, "child {pid} never exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    Pid::from_raw(pid as i32)
}

/// Run alone in a child process (its `waitpid(-1)` would take other tests'
/// children): an agent and the node shim both died and their SIGCHLD was
/// read already, as when the keeper reaped the last node shim first. The
/// next `watch` must still reap them, tell the agents' statuses and return.
/// One agent died by a real-time signal, which nix's waitpid cannot decode.
#[test]
fn zombie_scenario() {
    if std::env::var_os(SCENARIO).is_none() {
        return;
    }
    let agent = dead_child(None);
    let rt_signal = libc::SIGRTMIN() + 1;
    let rt_agent = dead_child(Some(rt_signal));
    let server = dead_child(None);
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    let signals =
        SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).unwrap();
    let (sock, _shim_sock) = seqpacket().unwrap();
    let (news, shim_news) = seqpacket().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Kept::new();
        let _ = tx.send(watch(server, &sock, &news, &signals, &mut kept));
    });
    let (up, status) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("watch waited for a SIGCHLD that had been read already");
    assert!(!up);
    assert_eq!(status, Ended::Exited(0));
    for (who, want) in [(agent, 0), (rt_agent, 128 + rt_signal as u32)] {
        match stash::recv(shim_news.as_fd()) {
            Ok((Msg::Reaped { pid, status }, _)) => {
                assert_eq!((pid, status), (who.as_raw(), want))
            }
            other => panic!("news of agent {who}: {other:?}"),
        }
        assert!(!zombie(who.as_raw() as u32), "agent {who} was reaped");
    }
    println!("SCENARIO OK");
}

#[test]
fn children_dead_before_the_watch_are_reaped() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "entry::node::keeper::tests::zombie_scenario",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("SCENARIO OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
