//! Identity changes of the calling thread only, by raw syscall.
//!
//! glibc's `setgroups`, `setresuid` and `setresgid` change every thread it
//! knows of, by signalling each (SIGSETXID) and waiting. In a child of a raw
//! `clone3` its thread list is still the parent's: a listed tid that the
//! child's new pid namespace happens to reuse (1, for the agent's own main
//! thread) is the child itself, and the wait never ends. Such a child has
//! one thread, so the kernel's per-thread calls are the whole change.

use nix::errno::Errno;

/// setgroups(2) for this thread.
pub fn setgroups(groups: &[u32]) -> Result<(), Errno> {
    // SAFETY: the kernel reads `len` gid_t values from a live slice.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    Errno::result(r).map(drop)
}

/// setresgid(2) for this thread: real, effective and saved all `gid`.
pub fn setresgid(gid: u32) -> Result<(), Errno> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    Errno::result(r).map(drop)
}

/// setresuid(2) for this thread: real, effective and saved all `uid`.
pub fn setresuid(uid: u32) -> Result<(), Errno> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    Errno::result(r).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (root only): the calls change this process's ids.
    #[test]
    fn the_calls_change_the_ids() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            rund_skip::skip("needs root");
            return;
        }
        // SAFETY: the child only makes syscalls and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let ok = setgroups(&[7, 8]).is_ok()
                    && setresgid(1234).is_ok()
                    && setresuid(4321).is_ok()
                    && nix::unistd::getgroups().is_ok_and(|g| g.len() == 2)
                    && nix::unistd::getegid().as_raw() == 1234
                    && nix::unistd::geteuid().as_raw() == 4321
                    && setresuid(0) == Err(Errno::EPERM);
                // SAFETY: ends the forked child.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let st = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
