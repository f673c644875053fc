//! startContainer hooks: run inside the container, by their path there,
//! after Start and before the workload's execve. The other hooks run in the
//! runtime namespace, from the shim.

use std::ffi::CString;
use std::io::Write;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{dup2_stdin, pipe};
use oci_spec::runtime::Hook;

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("pipe: {0}")]
    Pipe(Errno),
    #[error("fork: {0}")]
    Fork(Errno),
    #[error("wait: {0}")]
    Wait(Errno),
    #[error("{path} failed: {status}")]
    Failed { path: String, status: String },
    #[error("{path} timed out after {secs}s")]
    TimedOut { path: String, secs: i64 },
}

fn cstrs(v: &[String]) -> Vec<CString> {
    v.iter()
        .filter_map(|s| CString::new(s.as_bytes()).ok())
        .collect()
}

/// Runs one hook with the state JSON on stdin, honouring its timeout.
pub fn run(hook: &Hook, state: &str) -> Result<(), HookError> {
    let mut args = hook.args().clone().unwrap_or_default();
    if args.is_empty() {
        args.push(hook.path().display().to_string());
    }
    let argv = cstrs(&args);
    let envp = cstrs(&hook.env().clone().unwrap_or_default());
    let (r, w) = pipe().map_err(HookError::Pipe)?;
    // Raw: this is the container's process, a raw clone3 of the agent (see
    // `rund_sys::process::fork_raw`); the child only dups fds and execs.
    match rund_sys::process::fork_raw().map_err(HookError::Fork)? {
        None => {
            drop(w);
            let _ = dup2_stdin(&r);
            let path = CString::new(hook.path().as_os_str().as_encoded_bytes()).unwrap_or_default();
            let errno = match nix::unistd::execve(&path, &argv, &envp) {
                Err(e) => e,
                Ok(never) => match never {},
            };
            let _ = writeln!(
                std::io::stderr(),
                "rund-agent: exec hook {}: {errno}",
                hook.path().display()
            );
            // SAFETY: leave the forked child without running any destructor.
            unsafe { libc::_exit(127) }
        }
        Some(child) => {
            drop(r);
            let mut f = std::fs::File::from(w);
            // A hook may not read its stdin: EPIPE is not an error.
            let _ = f.write_all(state.as_bytes());
            drop(f);
            let deadline = hook
                .timeout()
                .map(|t| Instant::now() + Duration::from_secs(t.max(1) as u64));
            loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => {}
                    Ok(WaitStatus::Exited(_, 0)) => return Ok(()),
                    Ok(ws) => {
                        return Err(HookError::Failed {
                            path: hook.path().display().to_string(),
                            status: format!("{ws:?}"),
                        })
                    }
                    Err(e) => return Err(HookError::Wait(e)),
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    let _ = kill(child, Signal::SIGKILL);
                    let _ = waitpid(child, None);
                    return Err(HookError::TimedOut {
                        path: hook.path().display().to_string(),
                        secs: hook.timeout().unwrap_or(0),
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
