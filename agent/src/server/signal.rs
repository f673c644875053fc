//! Signals for a PID 1 of its own pid namespace. The kernel drops a signal
//! sent to a namespace init that has no handler for it, so a shell PID 1
//! would never die on TERM. rund reads the disposition from
//! /proc/<pid>/status and does what a normal process would get:
//! - caught: the signal is sent;
//! - ignored: nothing (the kernel would discard it too);
//! - default: the default action is carried out — terminate and core
//!   become SIGKILL (the exit is then reported as death by the signal),
//!   stop becomes SIGSTOP, continue is sent, ignore-by-default does nothing.

/// What to do for one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Send(i32),
    /// SIGKILL, reported as death by the given signal.
    KillFor(i32),
    Nothing,
}

/// The highest signal number Linux has.
pub const SIGMAX: i32 = 64;

fn mask(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

fn bit(m: u64, sig: i32) -> bool {
    (1..=SIGMAX).contains(&sig) && m & (1u64 << (sig - 1)) != 0
}

/// The plan for `sig` sent to a namespace init whose /proc status is `status`.
pub fn plan(sig: i32, status: &str) -> Plan {
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return Plan::Send(sig);
    }
    if bit(mask(status, "SigCgt:"), sig) {
        return Plan::Send(sig);
    }
    if bit(mask(status, "SigIgn:"), sig) {
        return Plan::Nothing;
    }
    match sig {
        libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH => Plan::Nothing,
        libc::SIGCONT => Plan::Send(sig),
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => Plan::Send(libc::SIGSTOP),
        // Everything else terminates (some with a core dump), real-time
        // signals included.
        _ => Plan::KillFor(sig),
    }
}

/// Sends a raw signal number (nix's Signal has no real-time signals).
pub fn send(pid: i32, sig: i32) -> Result<(), nix::errno::Errno> {
    // SAFETY: kill only sends a signal.
    nix::errno::Errno::result(unsafe { libc::kill(pid, sig) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(cgt: u64, ign: u64) -> String {
        format!("Name:\tsh\nSigBlk:\t0000000000000000\nSigIgn:\t{ign:016x}\nSigCgt:\t{cgt:016x}\n")
    }

    fn m(sigs: &[i32]) -> u64 {
        sigs.iter().fold(0, |a, s| a | 1 << (s - 1))
    }

    #[test]
    fn default_disposition_is_carried_out() {
        let sh = status(m(&[libc::SIGINT, libc::SIGCHLD]), m(&[libc::SIGQUIT]));
        assert_eq!(plan(libc::SIGTERM, &sh), Plan::KillFor(libc::SIGTERM));
        assert_eq!(plan(libc::SIGINT, &sh), Plan::Send(libc::SIGINT));
        assert_eq!(plan(libc::SIGQUIT, &sh), Plan::Nothing);
        assert_eq!(plan(libc::SIGWINCH, &sh), Plan::Nothing);
        assert_eq!(plan(libc::SIGTSTP, &sh), Plan::Send(libc::SIGSTOP));
        assert_eq!(plan(libc::SIGCONT, &sh), Plan::Send(libc::SIGCONT));
        assert_eq!(plan(libc::SIGKILL, &sh), Plan::Send(libc::SIGKILL));
        assert_eq!(plan(40, &sh), Plan::KillFor(40));
        let rt = status(m(&[40]), 0);
        assert_eq!(plan(40, &rt), Plan::Send(40));
        assert_eq!(plan(64, &status(m(&[64]), 0)), Plan::Send(64));
    }
}
