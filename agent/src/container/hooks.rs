//! OCI hooks run from inside the container set-up: createContainer hooks by
//! the fd the shim passed (their path is in the runtime namespace), and
//! startContainer hooks by path inside the container.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{dup2_stdin, fork, pipe, ForkResult};
use oci_spec::runtime::Hook;

pub enum Exe<'a> {
    Fd(BorrowedFd<'a>),
    Path(&'a Path),
}

fn cstrs(v: &[String]) -> Vec<CString> {
    v.iter()
        .filter_map(|s| CString::new(s.as_bytes()).ok())
        .collect()
}

/// Runs one hook with the state JSON on stdin, honouring its timeout.
pub fn run(exe: Exe<'_>, hook: &Hook, state: &str) -> Result<(), String> {
    let mut args = hook.args().clone().unwrap_or_default();
    if args.is_empty() {
        args.push(hook.path().display().to_string());
    }
    let argv = cstrs(&args);
    let envp = cstrs(&hook.env().clone().unwrap_or_default());
    let (r, w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: this process is single-threaded; the child only dups fds and execs.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(w);
            let _ = dup2_stdin(&r);
            let errno = match exe {
                Exe::Fd(fd) => {
                    // A script's interpreter opens /proc/self/fd/N: keep the fd across exec.
                    let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()));
                    crate::sys::raw::fexecve(fd, &argv, &envp)
                }
                Exe::Path(p) => {
                    let path = CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
                    match nix::unistd::execve(&path, &argv, &envp) {
                        Err(e) => e,
                        Ok(never) => match never {},
                    }
                }
            };
            let _ = writeln!(
                std::io::stderr(),
                "rund-agent: exec hook {}: {errno}",
                hook.path().display()
            );
            // SAFETY: leave the forked child without running any destructor.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => {
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
                    Ok(ws) => return Err(format!("{} failed: {ws:?}", hook.path().display())),
                    Err(e) => return Err(format!("wait: {e}")),
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    let _ = kill(child, Signal::SIGKILL);
                    let _ = waitpid(child, None);
                    return Err(format!(
                        "{} timed out after {}s",
                        hook.path().display(),
                        hook.timeout().unwrap_or(0)
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Runs the createContainer hooks from their fds ("createContainer:<i>").
pub fn run_create_hooks(
    hooks: &[Hook],
    fds: &std::collections::HashMap<String, std::os::fd::OwnedFd>,
    state: &str,
) -> Result<(), String> {
    use std::os::fd::AsFd;
    for (i, h) in hooks.iter().enumerate() {
        let key = format!("createContainer:{i}");
        let fd = fds.get(&key).ok_or_else(|| {
            format!(
                "createContainer hook {i} ({}): the shim passed no fd (FdKind::Hook({key:?}))",
                h.path().display()
            )
        })?;
        run(Exe::Fd(fd.as_fd()), h, state).map_err(|e| format!("createContainer hook {i}: {e}"))?;
    }
    Ok(())
}
