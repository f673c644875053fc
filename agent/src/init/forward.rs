//! Which signals the container init forwards to the workload.

use nix::sys::signal::{SigSet, Signal};

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

pub fn decide(sig: Signal) -> Action {
    use Signal::*;
    match sig {
        SIGCHLD => Action::Reap,
        SIGKILL | SIGSTOP => Action::Default,
        SIGFPE | SIGILL | SIGSEGV | SIGBUS | SIGABRT | SIGTRAP | SIGSYS => Action::Default,
        SIGTTIN | SIGTTOU => Action::Default,
        _ => Action::Forward,
    }
}

/// Every signal the init waits for (forwarded ones and SIGCHLD).
pub fn waited_set() -> SigSet {
    let mut set = SigSet::empty();
    for sig in Signal::iterator() {
        if decide(sig) != Action::Default {
            set.add(sig);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        for s in [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
            Signal::SIGUSR1,
            Signal::SIGUSR2,
            Signal::SIGWINCH,
            Signal::SIGALRM,
            Signal::SIGCONT,
            Signal::SIGTSTP,
            Signal::SIGPIPE,
        ] {
            assert_eq!(decide(s), Action::Forward, "{s}");
        }
        assert_eq!(decide(Signal::SIGCHLD), Action::Reap);
        for s in [
            Signal::SIGKILL,
            Signal::SIGSTOP,
            Signal::SIGSEGV,
            Signal::SIGTTOU,
        ] {
            assert_eq!(decide(s), Action::Default, "{s}");
        }
        let set = waited_set();
        assert!(set.contains(Signal::SIGTERM) && set.contains(Signal::SIGCHLD));
        assert!(!set.contains(Signal::SIGKILL) && !set.contains(Signal::SIGSEGV));
    }
}
