//! The tini-like container init: PID 1 of the container stays, forks the
//! workload into its own process group, forwards signals to that group,
//! reaps every zombie, and exits with the workload's status.

pub mod forward;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, getpid, setpgid, tcsetpgrp, ForkResult, Pid};

use crate::reaper::status;
use forward::{decide, waited_set, Action};

/// Runs the init. `workload` runs in the forked child and must exec (it
/// returns only an error message).
pub fn run(terminal: bool, workload: impl FnOnce() -> String) -> ! {
    let set = waited_set();
    let mut old = SigSet::empty();
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old));
    // SAFETY: the init is single-threaded; the child execs the workload.
    let child = match unsafe { fork() } {
        Err(e) => die(&format!("fork workload: {e}")),
        Ok(ForkResult::Child) => {
            let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
            if terminal {
                // From a background group tcsetpgrp raises SIGTTOU: block it meanwhile.
                let mut ttou = SigSet::empty();
                ttou.add(Signal::SIGTTOU);
                let _ = ttou.thread_block();
                let _ = tcsetpgrp(std::io::stdin(), getpid());
            }
            let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            die(&workload())
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    // Both sides set the group, so forwarding works whoever runs first.
    let _ = setpgid(child, child);
    loop {
        let Ok(sig) = set.wait() else { continue };
        match decide(sig) {
            Action::Reap => {
                if let Some(code) = reap(child) {
                    // SAFETY: _exit ends the init at once with the workload's status.
                    unsafe { libc::_exit(code) }
                }
            }
            Action::Forward => {
                if killpg(child, sig) == Err(Errno::ESRCH) {
                    let _ = kill(child, sig);
                }
            }
            Action::Default => {}
        }
    }
}

/// Reaps every zombie; returns the exit code once the workload is gone.
fn reap(workload: Pid) -> Option<i32> {
    let mut code = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return code,
            Ok(ws) if ws.pid() == Some(workload) => {
                code = status::encode(&ws).map(status::as_exit_code)
            }
            Ok(_) => {}
        }
    }
}

fn die(msg: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "rund-agent: {msg}");
    // SAFETY: leave the forked process without running destructors.
    unsafe { libc::_exit(127) }
}
