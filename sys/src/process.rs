//! Process syscalls nix does not wrap: clone3, close_range, pivot_root,
//! execveat, pidfd_open and pidfd_send_signal.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// clone3: start the child in the cgroup given by `clone_args.cgroup`.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// clone3 without a new stack: fork-like, with namespace flags.
/// Returns `None` in the child.
pub fn clone3(flags: CloneFlags) -> Result<Option<Pid>, Errno> {
    clone3_into(flags, None)
}

/// A fork by raw clone3, for a process that is itself the child of a raw
/// clone3 of a multi-threaded parent: libc's fork would take locks (its
/// fork handlers', the heap's, musl's thread list) whose state is the
/// parent's copy, held perhaps by a thread this process does not have.
pub fn fork_raw() -> Result<Option<Pid>, Errno> {
    clone3(CloneFlags::empty())
}

/// [`clone3`], the child starting in the cgroup v2 directory `cgroup`
/// (`CLONE_INTO_CGROUP`, Linux 5.7) when one is given.
pub fn clone3_into(
    flags: CloneFlags,
    cgroup: Option<BorrowedFd<'_>>,
) -> Result<Option<Pid>, Errno> {
    // SAFETY: clone_args is plain data; all-zero is a valid start.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags.bits() as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: no stack is given, so the child continues on a copy of ours like
    // fork(); the caller (single-threaded) only runs set-up code in the child.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match Errno::result(r)? {
        0 => Ok(None),
        pid => Ok(Some(Pid::from_raw(pid as i32))),
    }
}

/// Marks every fd >= `first` close-on-exec (Linux 5.11).
pub fn cloexec_from(first: u32) -> Result<(), Errno> {
    const CLOSE_RANGE_CLOEXEC: i32 = 1 << 2;
    // SAFETY: close_range with CLOEXEC only sets a flag on fds; none is closed.
    let r = unsafe { libc::close_range(first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    Errno::result(r).map(drop)
}

/// `pivot_root(".", ".")` then detach the old root: the caller must be in the new root.
pub fn pivot_here() -> Result<(), Errno> {
    let dot = c".";
    // SAFETY: valid NUL-terminated paths.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) };
    Errno::result(r)?;
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)?;
    nix::unistd::chdir("/")?;
    Ok(())
}

/// Resets every catchable signal to its default action and unblocks all
/// signals: a forked child must not run the agent's handlers, and an exec'd
/// workload must not inherit SIG_IGN for SIGPIPE from Rust's runtime.
pub fn reset_signals() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for sig in Signal::iterator() {
        if sig == Signal::SIGKILL || sig == Signal::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL never runs Rust code in a handler.
        let _ = unsafe { sigaction(sig, &dfl) };
    }
    let _ = SigSet::all().thread_unblock();
}

/// execveat(fd, "", argv, envp, AT_EMPTY_PATH): runs an executable we hold an fd to.
pub fn fexecve(fd: BorrowedFd<'_>, argv: &[CString], envp: &[CString]) -> Errno {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    let empty = c"";
    // SAFETY: argv/envp are NULL-terminated arrays of valid C strings that outlive the call.
    unsafe {
        libc::execveat(
            fd.as_raw_fd(),
            empty.as_ptr(),
            a.as_ptr() as *const *mut libc::c_char,
            e.as_ptr() as *const *mut libc::c_char,
            libc::AT_EMPTY_PATH,
        )
    };
    Errno::last()
}

/// A pidfd for `pid` (Linux 5.3): waits and signals that cannot reach a
/// recycled pid.
pub fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // no memory is shared with the kernel.
    let fd = Errno::result(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Sends `sig` to the process `pidfd` refers to (as kill(2)); ESRCH once it
/// has been reaped.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: Signal) -> Result<(), Errno> {
    // SAFETY: a null siginfo is allowed and means "as kill(2)"; no other
    // memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    Errno::result(r).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pidfd_signals_its_child_and_not_a_reaped_one() {
        // `cat` lives until its stdin closes, or the signal.
        let stdin = std::process::Stdio::piped();
        let mut child = std::process::Command::new("cat")
            .stdin(stdin)
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id() as i32).unwrap();
        pidfd_send_signal(std::os::fd::AsFd::as_fd(&fd), Signal::SIGKILL).unwrap();
        let st = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
        assert_eq!(
            pidfd_send_signal(std::os::fd::AsFd::as_fd(&fd), Signal::SIGKILL),
            Err(Errno::ESRCH)
        );
        assert_eq!(pidfd_open(-1).unwrap_err(), Errno::EINVAL);
    }

    /// The cgroup2 mount point, or a skip (needs root and a cgroup2 mount:
    /// pure v2, or the hybrid's unified).
    fn cgroup2_root() -> Option<std::path::PathBuf> {
        if !nix::unistd::geteuid().is_root() {
            rund_skip::skip!("needs root");
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
        });
        if root.is_none() {
            rund_skip::skip!("no cgroup2 mount");
        }
        root
    }

    /// The child of `clone3_into` is in the cgroup from its first instruction.
    /// Needs root and a cgroup2 mount (pure v2, or the hybrid's unified).
    #[test]
    fn clone3_into_starts_the_child_in_the_cgroup() {
        let Some(root) = cgroup2_root() else {
            return;
        };
        let name = format!("rund-sys-clone3-{}", std::process::id());
        let dir = root.join(&name);
        std::fs::create_dir(&dir).unwrap();
        let fd = std::fs::File::open(&dir).unwrap();
        let want = format!("0::/{name}");
        match clone3_into(CloneFlags::empty(), Some(std::os::fd::AsFd::as_fd(&fd))) {
            Ok(None) => {
                let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
                let code = i32::from(!cg.lines().any(|l| l == want));
                // SAFETY: leave the forked test child at once, running no test-harness code.
                unsafe { libc::_exit(code) };
            }
            Ok(Some(pid)) => {
                let st = nix::sys::wait::waitpid(pid, None).unwrap();
                let _ = std::fs::remove_dir(&dir);
                assert_eq!(
                    st,
                    nix::sys::wait::WaitStatus::Exited(pid, 0),
                    "the child was not in {want}"
                );
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                panic!("clone3(CLONE_INTO_CGROUP): {e}");
            }
        }
    }

    /// What a container's cgroup2 view rests on: a cgroup namespace made by
    /// the same clone3 that starts the child in its cgroup is rooted at that
    /// cgroup, so a fresh cgroup2 mount shows it (and nothing above) at its
    /// top. Needs root and a cgroup2 mount (pure v2, or the hybrid's unified).
    #[test]
    fn clone3_into_with_a_new_cgroup_namespace_roots_it_at_the_cgroup() {
        let Some(root) = cgroup2_root() else {
            return;
        };
        let dir = root.join(format!("rund-sys-cgns-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let fd = std::fs::File::open(&dir).unwrap();
        let view = tempfile::tempdir().unwrap();
        let flags = CloneFlags::CLONE_NEWCGROUP | CloneFlags::CLONE_NEWNS;
        match clone3_into(flags, Some(std::os::fd::AsFd::as_fd(&fd))) {
            Ok(None) => {
                use nix::mount::{mount, MsFlags};
                let none = None::<&str>;
                let ok = (|| {
                    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
                    own.lines().any(|l| l == "0::/").then_some(())?;
                    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none).ok()?;
                    mount(
                        Some("cgroup2"),
                        view.path(),
                        Some("cgroup2"),
                        MsFlags::empty(),
                        none,
                    )
                    .ok()?;
                    let procs = std::fs::read_to_string(view.path().join("cgroup.procs")).ok()?;
                    let me = std::process::id().to_string();
                    (procs.lines().collect::<Vec<_>>() == [me.as_str()]).then_some(())
                })();
                // SAFETY: leave the forked test child at once, running no test-harness code.
                unsafe { libc::_exit(i32::from(ok.is_none())) };
            }
            Ok(Some(pid)) => {
                let st = nix::sys::wait::waitpid(pid, None).unwrap();
                let _ = std::fs::remove_dir(&dir);
                assert_eq!(
                    st,
                    nix::sys::wait::WaitStatus::Exited(pid, 0),
                    "the new cgroup namespace is not rooted at {}",
                    dir.display()
                );
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                panic!("clone3(CLONE_INTO_CGROUP | CLONE_NEWCGROUP): {e}");
            }
        }
    }
}
