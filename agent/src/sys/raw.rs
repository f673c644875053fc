//! Raw syscalls nix does not wrap (new mount API, clone3, close_range).

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
/// The atime bits: setting one of the atime modes must clear the others.
pub const MOUNT_ATTR_ATIME: u64 = 0x70;
/// clone3: start the child in the cgroup given by `clone_args.cgroup`.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

fn cpath(p: &Path) -> Result<CString, Errno> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)
}

/// Attaches the detached (or any) mount `from` at `target`.
pub fn move_mount_fd(from: BorrowedFd<'_>, target: &Path) -> Result<(), Errno> {
    let c = cpath(target)?;
    let empty = c"";
    // SAFETY: valid fd and NUL-terminated strings for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(r).map(drop)
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(AT_FDCWD, target, [AT_RECURSIVE], {set, clr})`.
pub fn mount_setattr(target: &Path, set: u64, clr: u64, recursive: bool) -> Result<(), Errno> {
    let c = cpath(target)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: attr lives across the call and its size is passed along.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(r).map(drop)
}

/// clone3 without a new stack: fork-like, with namespace flags.
/// Returns `None` in the child.
pub fn clone3(flags: CloneFlags) -> Result<Option<Pid>, Errno> {
    clone3_into(flags, None)
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

/// Closes every fd >= `first` (used right before execve).
pub fn close_from(first: u32) -> Result<(), Errno> {
    // SAFETY: close_range only closes fds; nothing in this process uses them after this point.
    let r = unsafe { libc::close_range(first, u32::MAX, 0) };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The child of `clone3_into` is in the cgroup from its first instruction.
    /// Needs root and a cgroup2 mount (pure v2, or the hybrid's unified).
    #[test]
    fn clone3_into_starts_the_child_in_the_cgroup() {
        if !nix::unistd::geteuid().is_root() {
            rund_skip::skip!("needs root");
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let Some(root) = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
        }) else {
            rund_skip::skip!("no cgroup2 mount");
        };
        let name = format!("rund-agent-clone3-{}", std::process::id());
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
}
