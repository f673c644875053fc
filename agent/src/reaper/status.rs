//! Exit status encoding: the shell convention used on the wire.

use nix::sys::wait::WaitStatus;

/// The exit code, or 128+N after death by signal N; `None` for stops and continues.
pub fn encode(ws: &WaitStatus) -> Option<u32> {
    match ws {
        WaitStatus::Exited(_, code) => Some(*code as u32 & 0xff),
        WaitStatus::Signaled(_, sig, _) => Some(128 + *sig as u32),
        _ => None,
    }
}

/// The same encoding as an exit code a process can `_exit` with.
pub fn as_exit_code(status: u32) -> i32 {
    (status & 0xff) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use nix::unistd::Pid;

    #[test]
    fn exit_codes_and_signals() {
        let p = Pid::from_raw(7);
        assert_eq!(encode(&WaitStatus::Exited(p, 0)), Some(0));
        assert_eq!(encode(&WaitStatus::Exited(p, 7)), Some(7));
        assert_eq!(
            encode(&WaitStatus::Signaled(p, Signal::SIGTERM, false)),
            Some(143)
        );
        assert_eq!(
            encode(&WaitStatus::Signaled(p, Signal::SIGKILL, true)),
            Some(137)
        );
        assert_eq!(encode(&WaitStatus::Stopped(p, Signal::SIGSTOP)), None);
        assert_eq!(encode(&WaitStatus::StillAlive), None);
        assert_eq!(as_exit_code(143), 143);
    }
}
