//! Which signals the init forwards to the workload, by raw number so that
//! real-time signals are forwarded too.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Reap children (SIGCHLD).
    Reap,
    /// Send to the workload's process group.
    Forward,
    /// Left at its default: cannot be caught, or is synchronous (a fault of
    /// the init itself), or is terminal job control aimed at the init.
    Default,
}

pub fn decide(sig: i32) -> Action {
    match sig {
        libc::SIGCHLD => Action::Reap,
        libc::SIGKILL | libc::SIGSTOP => Action::Default,
        libc::SIGFPE | libc::SIGILL | libc::SIGSEGV | libc::SIGBUS | libc::SIGABRT => {
            Action::Default
        }
        libc::SIGTRAP | libc::SIGSYS | libc::SIGTTIN | libc::SIGTTOU => Action::Default,
        _ => Action::Forward,
    }
}

/// Every signal number the init can catch: the standard ones and the
/// real-time ones libc leaves to programs (SIGRTMIN..=SIGRTMAX).
pub fn catchable() -> impl Iterator<Item = i32> {
    (1..32).chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
}

/// Every signal the init waits for (forwarded ones and SIGCHLD).
pub fn waited_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; these only set bits.
    unsafe { libc::sigemptyset(&mut set) };
    for sig in catchable().filter(|s| decide(*s) != Action::Default) {
        // SAFETY: as above.
        unsafe { libc::sigaddset(&mut set, sig) };
    }
    set
}

#[cfg(test)]
/// Whether `sig` is in `set`.
pub fn has(set: &libc::sigset_t, sig: i32) -> bool {
    // SAFETY: sigismember reads a bit of a valid sigset_t.
    unsafe { libc::sigismember(set, sig) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        for s in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGWINCH,
            libc::SIGCONT,
            libc::SIGTSTP,
            libc::SIGPIPE,
            libc::SIGRTMIN() + 3,
        ] {
            assert_eq!(decide(s), Action::Forward, "{s}");
        }
        assert_eq!(decide(libc::SIGCHLD), Action::Reap);
        for s in [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, libc::SIGTTOU] {
            assert_eq!(decide(s), Action::Default, "{s}");
        }
        let set = waited_set();
        assert!(has(&set, libc::SIGTERM) && has(&set, libc::SIGCHLD));
        assert!(!has(&set, libc::SIGKILL) && !has(&set, libc::SIGSEGV));
        assert!(
            has(&set, libc::SIGRTMAX()),
            "real-time signals are forwarded"
        );
    }
}
