//! Exit status encoding: the shell convention used on the wire.

/// The exit code, or 128+N after death by signal N (real-time ones too);
/// `None` for stops and continues.
pub fn encode(raw: i32) -> Option<u32> {
    if libc::WIFEXITED(raw) {
        Some(libc::WEXITSTATUS(raw) as u32 & 0xff)
    } else if libc::WIFSIGNALED(raw) {
        Some(128 + libc::WTERMSIG(raw) as u32)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_signals() {
        // Wait statuses as the kernel builds them.
        let exited = |code: i32| code << 8;
        let signaled = |sig: i32| sig;
        assert_eq!(encode(exited(0)), Some(0));
        assert_eq!(encode(exited(7)), Some(7));
        assert_eq!(encode(signaled(libc::SIGTERM)), Some(143));
        assert_eq!(encode(signaled(libc::SIGKILL) | 0x80), Some(137));
        assert_eq!(encode(signaled(40)), Some(168));
        // Stopped by SIGSTOP: 0x7f in the low byte.
        assert_eq!(encode((libc::SIGSTOP << 8) | 0x7f), None);
    }
}
