//! rund-init: the opt-in PID 1 of a container. The agent execs it (from a
//! sealed memfd) with the workload's attributes already applied; it forks
//! the workload into its own process group and drops what it does not need
//! itself before the workload may exec (so the workload never sees a PID 1
//! holding more than it does), forwards every catchable signal, reaps every
//! zombie, and exits with the workload's status.
//!
//! Usage: `rund-init [--tty] -- PATH ARGV0 [ARGS...]` (environment: the workload's),
//! or `rund-init --pause`: PID 1 of a pod's shared pid namespace, which only
//! reaps, as nobody with no capabilities, until TERM or INT.

mod forward;
mod privs;

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;

use forward::{decide, waited_set, Action};

struct Args {
    tty: bool,
    path: CString,
    argv: Vec<CString>,
}

fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut it = args.into_iter().skip(1);
    let mut tty = false;
    loop {
        match it.next().map(|a| a.into_vec()) {
            Some(a) if a == b"--tty" => tty = true,
            Some(a) if a == b"--" => break,
            Some(a) => return Err(format!("unknown option {:?}", String::from_utf8_lossy(&a))),
            None => return Err("usage: rund-init [--tty] -- PATH ARGV0 [ARGS...]".into()),
        }
    }
    let mut rest = it.map(|a| CString::new(a.into_vec()).map_err(|_| "NUL in an argument"));
    let path = rest.next().ok_or("no workload path")??;
    let argv: Vec<CString> = rest.collect::<Result<_, _>>()?;
    if argv.is_empty() {
        return Err("no workload argv".into());
    }
    Ok(Args { tty, path, argv })
}

fn die(msg: &str) -> ! {
    eprintln!("rund-init: {msg}");
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(127) }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn main() {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "--pause") {
        pause();
    }
    let args = parse(argv).unwrap_or_else(|e| die(&e));
    let set = waited_set();
    // SAFETY: an all-zero sigset_t is valid storage for the old mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; blocking signals has no memory effects.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old) };
    // The workload waits on this pipe until the init has dropped its privileges.
    let mut gate = [0; 2];
    // SAFETY: pipe2 fills two fds into our array.
    if unsafe { libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        die(&format!("pipe: {}", errno()));
    }
    // SAFETY: single-threaded; the child only calls async-signal-safe code and execs.
    let child = unsafe { libc::fork() };
    if child < 0 {
        die(&format!("fork the workload: {}", errno()));
    }
    if child == 0 {
        run_workload(&args, &old, gate);
    }
    // Both sides set the group, so forwarding works whoever runs first.
    // SAFETY: plain syscalls on our own child and our own fds.
    unsafe {
        libc::setpgid(child, child);
        libc::close(gate[0]);
    }
    privs::drop_own();
    // SAFETY: closing our end lets the workload go on (EOF).
    unsafe { libc::close(gate[1]) };
    loop {
        // SAFETY: `set` is a valid sigset; a null siginfo pointer is allowed.
        let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        if sig < 0 {
            continue;
        }
        match decide(sig) {
            Action::Reap => {
                if let Some(code) = reap(child) {
                    // SAFETY: ends the init with the workload's status.
                    unsafe { libc::_exit(code) }
                }
            }
            Action::Forward => {
                // SAFETY: kill only sends a signal.
                if unsafe { libc::kill(-child, sig) } < 0 {
                    // SAFETY: as above; the group may not exist yet.
                    unsafe { libc::kill(child, sig) };
                }
            }
            Action::Default => {}
        }
    }
}

/// The pod's pid namespace init: reaps orphans, ends on TERM or INT.
fn pause() -> ! {
    privs::become_nobody().unwrap_or_else(|e| die(&e));
    let set = waited_set();
    // SAFETY: valid sigset; blocking signals has no memory effects.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    loop {
        // SAFETY: as in main.
        let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
        match sig {
            libc::SIGCHLD => {
                reap(0);
            }
            libc::SIGTERM | libc::SIGINT => {
                // SAFETY: ends the process.
                unsafe { libc::_exit(0) }
            }
            _ => {}
        }
    }
}

fn run_workload(args: &Args, old_mask: &libc::sigset_t, gate: [libc::c_int; 2]) -> ! {
    // SAFETY: plain syscalls in the forked child; `gate` are our pipe fds.
    unsafe {
        libc::setpgid(0, 0);
        libc::close(gate[1]);
        // Until the init has dropped its privileges: EOF (or the init's death).
        let mut b = 0u8;
        while libc::read(gate[0], (&mut b as *mut u8).cast(), 1) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::close(gate[0]);
    }
    if args.tty {
        // From a background group tcsetpgrp raises SIGTTOU: block it meanwhile
        // (the mask is restored right after).
        // SAFETY: valid sigset storage; plain syscalls on fd 0.
        unsafe {
            let mut ttou: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut ttou);
            libc::sigaddset(&mut ttou, libc::SIGTTOU);
            libc::sigprocmask(libc::SIG_BLOCK, &ttou, std::ptr::null_mut());
            libc::tcsetpgrp(0, libc::getpid());
        }
    }
    // SAFETY: restores the mask the init started with.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut()) };
    let mut argv: Vec<*const libc::c_char> = args.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: argv is NULL-terminated and outlives the call; environ is the
    // process environment (the workload's, set by the agent).
    unsafe { libc::execve(args.path.as_ptr(), argv.as_ptr(), environ) };
    die(&format!("exec {:?}: {}", args.path, errno()))
}

/// Reaps every zombie; returns the exit code once the workload is gone.
fn reap(workload: libc::pid_t) -> Option<i32> {
    let mut code = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into our variable.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return code;
        }
        if pid == workload {
            if libc::WIFEXITED(status) {
                code = Some(libc::WEXITSTATUS(status));
            } else if libc::WIFSIGNALED(status) {
                code = Some((128 + libc::WTERMSIG(status)) & 0xff);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments() {
        let a = parse(os(&[
            "rund-init",
            "--tty",
            "--",
            "/bin/sh",
            "sh",
            "-c",
            "x",
        ]))
        .unwrap();
        assert!(a.tty);
        assert_eq!(a.path.as_bytes(), b"/bin/sh");
        assert_eq!(a.argv.len(), 3);
        assert!(parse(os(&["rund-init", "--", "/bin/sh"])).is_err());
        assert!(parse(os(&["rund-init", "--bogus", "--", "/x", "x"])).is_err());
        assert!(parse(os(&["rund-init"])).is_err());
    }
}
