use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::sys::wait::{waitpid, WaitStatus};

use super::*;

/// Runs `sh -c script` with the pairs of `fds` placed; returns its exit code.
fn sh(script: &str, fds: &[(BorrowedFd<'_>, RawFd)]) -> i32 {
    let script = std::ffi::CString::new(script).unwrap();
    let pid = spawn_with_fds(c"/bin/sh", &[c"sh", c"-c", &script], fds).unwrap();
    match waitpid(pid, None).unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("sh: {other:?}"),
    }
}

fn pipe() -> (std::fs::File, OwnedFd) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    (std::fs::File::from(r), w)
}

fn read_all(mut r: std::fs::File) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn an_fd_is_placed_at_its_number() {
    let (r, w) = pipe();
    assert_eq!(sh("echo placed >&7", &[(w.as_fd(), 7)]), 0);
    drop(w);
    assert_eq!(read_all(r), "placed\n");
}

#[test]
fn sources_that_are_each_others_targets_are_not_overwritten() {
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let (n1, n2) = (w1.as_raw_fd(), w2.as_raw_fd());
    // w1 goes to w2's number and w2 to w1's: a plain dup2 in order would
    // write w1 over w2 before w2 is copied.
    let script = format!("echo one >&{n2}; echo two >&{n1}");
    assert_eq!(sh(&script, &[(w1.as_fd(), n2), (w2.as_fd(), n1)]), 0);
    drop((w1, w2));
    assert_eq!(read_all(r1), "one\n");
    assert_eq!(read_all(r2), "two\n");
}

#[test]
fn stdio_not_given_is_dev_null_and_no_cloexec_fd_is_inherited() {
    let (r, w) = pipe();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cloexec-marker");
    let kept = std::fs::File::create(&marker).unwrap();
    let pid = spawn_with_fds(c"/bin/sleep", &[c"sleep", c"10"], &[(w.as_fd(), 4)]).unwrap();
    // The spawn returns once the child has exec'd: what it inherited is
    // there (and maybe files sleep opens itself).
    let fds: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            let to = std::fs::read_link(e.path()).ok()?;
            Some((n, to.display().to_string()))
        })
        .collect();
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = waitpid(pid, None);
    for std in 0..=2 {
        assert!(
            fds.contains(&(std, "/dev/null".into())),
            "fd {std}: {fds:?}"
        );
    }
    let link = |fd: RawFd| {
        let to = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        to.display().to_string()
    };
    assert!(fds.contains(&(4, link(w.as_raw_fd()))), "{fds:?}");
    let ours = link(kept.as_raw_fd());
    assert!(
        !fds.iter().any(|(_, to)| *to == ours),
        "{ours} is CLOEXEC: {fds:?}"
    );
    // One end of the pipe, once: neither the read end nor the lifted copy
    // of the write end was inherited.
    drop(r);
    assert_eq!(
        fds.iter()
            .filter(|(_, to)| *to == link(w.as_raw_fd()))
            .count(),
        1,
        "{fds:?}"
    );
}

#[test]
fn the_child_starts_with_no_blocked_signal_and_sigpipe_at_its_default() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
    // The test harness ignores SIGPIPE, as the shim does; block one more here.
    let mut usr1 = SigSet::empty();
    usr1.add(Signal::SIGUSR1);
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&usr1), None).unwrap();
    let (r, w) = pipe();
    // Builtins only: dash blocks every signal around a fork of its own.
    let script = "while read -r k v; do case $k in SigBlk:|SigIgn:) echo \"$k $v\";; esac; done </proc/$$/status >&4";
    let code = sh(script, &[(w.as_fd(), 4)]);
    pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&usr1), None).unwrap();
    assert_eq!(code, 0);
    drop(w);
    let out = read_all(r);
    let mask = |name: &str| {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{out}");
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    assert_eq!(mask("SigIgn:") & sigpipe, 0, "{out}");
}

#[test]
fn an_exec_that_fails_is_the_error() {
    let err = spawn_with_fds(c"/nonexistent/rund-agent", &[c"x"], &[]).unwrap_err();
    assert_eq!(err, Errno::ENOENT);
}

#[test]
fn a_negative_target_is_refused() {
    let (_r, w) = pipe();
    let err = spawn_with_fds(c"/bin/true", &[c"true"], &[(w.as_fd(), -1)]).unwrap_err();
    assert_eq!(err, Errno::EBADF);
}
