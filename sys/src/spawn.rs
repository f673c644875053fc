//! posix_spawn with fds placed at fixed numbers. glibc runs the child on
//! the caller's memory (`CLONE_VM | CLONE_VFORK`) until it execs: no page
//! table is copied, and the caller's other threads take no copy-on-write
//! faults meanwhile, as they would after a fork().

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Starts `path` with `argv` and this process's environment. The child's fd
/// `to` is a copy of `from` for each pair of `fds`; any of 0, 1 and 2 not
/// given is /dev/null; every other fd of ours is closed by its CLOEXEC.
/// The child's signal mask is empty and SIGPIPE is back to its default. An
/// exec that fails is this call's error.
pub fn spawn_with_fds(
    path: &CStr,
    argv: &[&CStr],
    fds: &[(BorrowedFd<'_>, RawFd)],
) -> Result<Pid, Errno> {
    let top = fds.iter().map(|(_, to)| *to).max().unwrap_or(2).max(2);
    if fds.iter().any(|(_, to)| *to < 0) {
        return Err(Errno::EBADF);
    }
    // Sources above every target: a dup2 never overwrites a later source.
    let lifted: Vec<(OwnedFd, RawFd)> = fds
        .iter()
        .map(|(from, to)| Ok((dup_above(*from, top + 1)?, *to)))
        .collect::<Result<_, Errno>>()?;
    let mut actions = FileActions::new()?;
    let null = c"/dev/null";
    for std in 0..=2 {
        if !fds.iter().any(|(_, to)| *to == std) {
            actions.open(std, null, libc::O_RDWR)?;
        }
    }
    for (from, to) in &lifted {
        actions.dup2(from.as_raw_fd(), *to)?;
    }
    let attr = Attr::new()?;
    let mut argv_ptrs: Vec<*mut libc::c_char> =
        argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut pid: libc::pid_t = 0;
    // The child runs only glibc's code up to its exec. `path` and `argv`
    // are NUL-terminated and borrowed for the call; `argv_ptrs` ends with NULL.
    // SAFETY: valid pointers (above), libc's `environ`, initialised actions and attributes.
    let r = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attr.0,
            argv_ptrs.as_ptr(),
            environ.cast(),
        )
    };
    drop(lifted);
    if r != 0 {
        return Err(Errno::from_raw(r));
    }
    Ok(Pid::from_raw(pid))
}

/// A CLOEXEC copy of `fd` at the lowest free number at or above `floor`.
pub fn dup_above(fd: BorrowedFd<'_>, floor: RawFd) -> Result<OwnedFd, Errno> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a borrowed, open fd: a new fd or -1.
    let n = Errno::result(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) })?;
    // SAFETY: a fresh fd from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> Result<Self, Errno> {
        // SAFETY: zeroed storage that posix_spawn_file_actions_init fills in.
        let mut fa: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
        // SAFETY: `fa` is valid, writable storage.
        errno(unsafe { libc::posix_spawn_file_actions_init(&mut fa) })?;
        Ok(FileActions(fa))
    }

    fn open(&mut self, fd: RawFd, path: &CStr, flags: i32) -> Result<(), Errno> {
        // SAFETY: initialised actions; glibc copies `path`.
        errno(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, path.as_ptr(), flags, 0)
        })
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> Result<(), Errno> {
        // SAFETY: initialised actions; only fd numbers are recorded.
        errno(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attr(libc::posix_spawnattr_t);

impl Attr {
    fn new() -> Result<Self, Errno> {
        // SAFETY: zeroed storage that posix_spawnattr_init fills in.
        let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
        // SAFETY: `attr` is valid, writable storage.
        errno(unsafe { libc::posix_spawnattr_init(&mut attr) })?;
        let mut attr = Attr(attr);
        // SAFETY: sigset_t storage filled by sigemptyset/sigaddset; the
        // attribute calls copy the sets.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            errno(libc::posix_spawnattr_setsigmask(&mut attr.0, &empty))?;
            errno(libc::posix_spawnattr_setsigdefault(&mut attr.0, &pipe))?;
            let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            errno(libc::posix_spawnattr_setflags(
                &mut attr.0,
                flags as libc::c_short,
            ))?;
        }
        Ok(attr)
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

fn errno(r: libc::c_int) -> Result<(), Errno> {
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw(r))
    }
}

#[cfg(test)]
mod tests;
