//! Forking a process born in its cgroup, so the shim's placement moves
//! nothing (see rund-cgroup's `birth.rs` for why: a `cgroup.procs` write
//! waits a whole RCU grace period for the kernel's global lock).
//! - v2: `clone3(CLONE_INTO_CGROUP)` with the cgroup's directory fd.
//! - v1: a short-lived thread writes "0" to each `tasks` fd the shim opened,
//!   which moves only that thread and takes no global lock, then forks; the
//!   child is born in the thread's cgroups, and the thread ends (so the
//!   agent itself stays where it was).
//!
//! Anything refused falls back to a plain clone3 in the calling thread; the
//! shim then places the child through `cgroup.procs` as before.

use std::convert::Infallible;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;
use rund_sys::process::{clone3, clone3_into};

use crate::container::fds::PassedFds;

/// Where a child is born.
#[derive(Default)]
pub struct Birthplace {
    /// A cgroup v2 directory (`CLONE_INTO_CGROUP`).
    pub cgroup2: Option<OwnedFd>,
    /// v1: `tasks` of each hierarchy, open for writing.
    pub tasks: Vec<OwnedFd>,
}

impl Birthplace {
    /// The birthplace fds of a request, out of its passed fds (they must
    /// not reach the child).
    pub fn take(fds: &mut PassedFds) -> Self {
        Birthplace {
            cgroup2: fds.cgroup.take(),
            tasks: std::mem::take(&mut fds.cgroup_tasks),
        }
    }
}

/// The forking thread's stack: the child runs its whole set-up on a copy of
/// it, as it would on the main thread's (only touched pages cost memory).
const STACK: usize = 8 << 20;

/// clone3 with `flags`; the child runs `child` (which never returns), the
/// parent gets its pid. No idle trim runs meanwhile (it could hold the heap's
/// lock, which a child of a raw clone3 would then never get).
pub fn fork_in<F>(flags: CloneFlags, place: Birthplace, child: F) -> Result<Pid, Errno>
where
    F: FnOnce() -> Infallible + Send,
{
    rund_sys::trim::no_trim_while(|| fork_placed(flags, place, child))
}

fn fork_placed<F>(flags: CloneFlags, place: Birthplace, child: F) -> Result<Pid, Errno>
where
    F: FnOnce() -> Infallible + Send,
{
    let Birthplace { cgroup2, tasks } = place;
    let child = if tasks.is_empty() {
        child
    } else {
        match born_in_v1(flags, &tasks, child) {
            V1Birth::Born(pid) => return Ok(pid),
            V1Birth::Refused(child) => child,
            V1Birth::NoThread(e) => return Err(e),
        }
    };
    let pid = match cgroup2
        .as_ref()
        .map(|c| clone3_into(flags, Some(c.as_fd())))
    {
        None => clone3(flags)?,
        Some(Ok(pid)) => pid,
        Some(Err(e)) => {
            crate::debug!("CLONE_INTO_CGROUP refused ({e}); plain clone3");
            clone3(flags)?
        }
    };
    match pid {
        None => run(child),
        Some(pid) => Ok(pid),
    }
}

/// The child's side: runs `child`, which never returns.
fn run<F: FnOnce() -> Infallible>(child: F) -> ! {
    match child() {}
}

enum V1Birth<F> {
    Born(Pid),
    /// The fork failed in the thread (a pids limit counts the thread too):
    /// `child` back, for a plain fork.
    Refused(F),
    /// No thread could be started.
    NoThread(Errno),
}

/// The v1 birth, in a thread of its own.
fn born_in_v1<F>(flags: CloneFlags, tasks: &[OwnedFd], child: F) -> V1Birth<F>
where
    F: FnOnce() -> Infallible + Send,
{
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("rund-birth".into())
            .stack_size(STACK)
            .spawn_scoped(s, move || {
                for fd in tasks {
                    // "0": this thread. Refused, the shim writes cgroup.procs.
                    if let Err(e) = nix::unistd::write(fd.as_fd(), b"0") {
                        crate::debug!("joining a v1 cgroup by its tasks file: {e}");
                    }
                }
                match clone3(flags) {
                    Ok(None) => run(child),
                    Ok(Some(pid)) => V1Birth::Born(pid),
                    Err(e) => {
                        crate::debug!("clone3 in the birth thread: {e}");
                        V1Birth::Refused(child)
                    }
                }
            });
        match thread {
            Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(e) => V1Birth::NoThread(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::{waitpid, WaitStatus};
    use std::path::Path;

    fn exit_at_once() -> Infallible {
        // SAFETY: leaves the forked test child at once.
        unsafe { libc::_exit(0) }
    }

    fn reaped(pid: Pid) {
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
    }

    #[test]
    fn a_refused_cgroup_falls_back_to_a_plain_clone() {
        // Not a cgroup2 directory: the kernel refuses CLONE_INTO_CGROUP.
        let place = Birthplace {
            cgroup2: Some(std::fs::File::open("/").unwrap().into()),
            tasks: Vec::new(),
        };
        reaped(fork_in(CloneFlags::empty(), place, exit_at_once).unwrap());
    }

    #[test]
    fn refused_tasks_writes_still_fork() {
        // /dev/null takes the write but moves nothing: the child is born here.
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        let place = Birthplace {
            cgroup2: None,
            tasks: vec![null.into()],
        };
        reaped(fork_in(CloneFlags::empty(), place, exit_at_once).unwrap());
    }

    /// On a v1 host (root): the child is born in the pids cgroup the tasks
    /// fd names, and the calling thread has not moved.
    #[test]
    fn a_child_is_born_in_the_v1_cgroup_and_the_caller_stays() {
        let root = Path::new("/sys/fs/cgroup/pids");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !root.join("tasks").exists() {
            rund_skip::skip("needs root and a v1 pids hierarchy");
            return;
        }
        let dir = root.join(format!("rund-agent-birth-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let before = std::fs::read_to_string("/proc/thread-self/cgroup").unwrap();
        let tasks = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("tasks"))
            .unwrap();
        let place = Birthplace {
            cgroup2: None,
            tasks: vec![tasks.into()],
        };
        let pid = fork_in(CloneFlags::empty(), place, || {
            // SAFETY: the child waits to be killed.
            unsafe { libc::pause() };
            exit_at_once()
        })
        .unwrap();
        // The ended birth thread may still be listed for a moment.
        let procs = settled(&dir.join("cgroup.procs"), &pid.to_string());
        let after = std::fs::read_to_string("/proc/thread-self/cgroup").unwrap();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        waitpid(pid, None).unwrap();
        remove_when_empty(&dir);
        assert_eq!(procs, pid.to_string(), "only the child is in the cgroup");
        assert_eq!(after, before, "the caller moved");
    }

    /// The file's trimmed contents once they equal `want`, or after 2 s.
    fn settled(file: &Path, want: &str) -> String {
        let mut now = String::new();
        for _ in 0..200 {
            now = std::fs::read_to_string(file).unwrap().trim().to_string();
            if now == want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        now
    }

    /// rmdir, retried on EBUSY for up to 2 s: the joined birth thread may
    /// still be in the cgroup (a join returns when its tid is cleared, which
    /// the kernel does before the thread leaves its cgroups).
    fn remove_when_empty(dir: &Path) {
        for _ in 0..200 {
            match std::fs::remove_dir(dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                r => return r.unwrap(),
            }
        }
        panic!("{} stayed busy", dir.display());
    }
}
