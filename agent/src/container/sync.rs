//! The set-up channel between the agent and a process it forks: the child
//! reports (its pid after a pid-ns fork, then ready or an error) and waits
//! for the start byte.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ChildMsg {
    /// The pid (agent namespace) of the process that will run the workload,
    /// sent by the intermediate fork when a pid namespace is joined.
    Pid {
        pid: i32,
    },
    Ready,
    Error {
        message: String,
    },
}

/// Child side: report.
pub fn report(sock: BorrowedFd<'_>, msg: &ChildMsg) {
    let _ = rund_proto::launch::send_json(sock, msg);
}

/// Child side: block until the agent sends the start byte (false if it went away).
pub fn wait_start(sock: BorrowedFd<'_>) -> bool {
    let mut b = [0u8; 8];
    loop {
        match nix::sys::socket::recv(
            sock.as_raw_fd(),
            &mut b,
            nix::sys::socket::MsgFlags::empty(),
        ) {
            Ok(n) => return n > 0,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// Closes every fd >= 3 except `keep` (a forked child must not hold the
/// agent's sockets or another container's set-up channel).
pub fn close_others(keep: &[RawFd]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd >= 3 && !keep.contains(&fd) {
            // SAFETY: nothing in this freshly forked child uses fds outside `keep`.
            unsafe { libc::close(fd) };
        }
    }
}

pub fn raw<F: AsFd>(f: &F) -> RawFd {
    f.as_fd().as_raw_fd()
}
