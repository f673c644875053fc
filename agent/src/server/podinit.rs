//! The pod's shared pid namespace (shareProcessNamespace). Containers that
//! share a pid namespace must never share the agent's: a container with
//! CAP_SYS_PTRACE could otherwise take over the agent. So the shared one is
//! a child namespace whose PID 1 is `rund-init --pause` (nobody, no
//! capabilities, not dumpable), made when the first container asks for it.

use std::convert::Infallible;
use std::os::fd::{AsFd, OwnedFd};

use nix::sched::CloneFlags;
use nix::unistd::Pid;

use super::birth::{self, Birthplace};
use super::spawn::{internal, SpawnError};
use super::AgentService;

/// The pod init: its pid and its pid namespace.
pub struct PodPid {
    pub pid: Pid,
    pub ns: OwnedFd,
}

/// An fd of the pod's pid namespace, made on first use.
pub fn ensure(svc: &AgentService) -> Result<OwnedFd, SpawnError> {
    let mut slot = svc.pod_pid.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = slot.as_ref() {
        return p
            .ns
            .try_clone()
            .map_err(|e| internal(format!("dup pod pid namespace: {e}")));
    }
    let bin = svc
        .init_bin
        .get()
        .map_err(|e| internal(format!("pod pid namespace: {e}")))?;
    let place = Birthplace::default();
    let pid = birth::fork_in(CloneFlags::CLONE_NEWPID, place, move || -> Infallible {
        pause_main(bin)
    })
    .map_err(|e| internal(format!("pod pid namespace: clone3: {e}")))?;
    let path = format!("/proc/{pid}/ns/pid");
    let ns = std::fs::File::open(&path)
        .map(OwnedFd::from)
        .map_err(|e| internal(format!("pod pid namespace: open {path}: {e}")))?;
    crate::debug!("pod pid namespace made: its init is pid {pid}");
    let dup = ns
        .try_clone()
        .map_err(|e| internal(format!("dup pod pid namespace: {e}")))?;
    *slot = Some(PodPid { pid, ns });
    Ok(dup)
}

/// The forked child: nothing of the agent's, then rund-init --pause.
fn pause_main(bin: OwnedFd) -> ! {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    rund_sys::process::reset_signals();
    crate::container::sync::close_others(&[crate::container::sync::raw(&bin)]);
    let _ = nix::unistd::chdir("/");
    let argv = [c"rund-init".to_owned(), c"--pause".to_owned()];
    let errno = rund_sys::process::fexecve(bin.as_fd(), &argv, &[]);
    crate::warn!("pod pid namespace: exec rund-init --pause: {errno}");
    // SAFETY: leave the forked child without running the agent's destructors.
    unsafe { libc::_exit(127) }
}
