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
    /// The container's namespaces (fds attached, in this order), for execs
    /// to join: sent by the process itself, which may open its own
    /// /proc/self/ns while it is not dumpable.
    Namespaces {
        names: Vec<String>,
    },
    /// Mounts done, stopped before pivot_root until resumed.
    Paused,
    Ready,
    Error {
        message: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("open {path}: {source}")]
    OpenNs {
        path: String,
        source: std::io::Error,
    },
    #[error("send namespaces: {0}")]
    Send(rund_proto::fdpass::FdPassError),
}

/// Child side: report.
pub fn report(sock: BorrowedFd<'_>, msg: &ChildMsg) {
    let _ = rund_proto::fdpass::send_msg(sock, msg, &[]);
}

/// Namespaces execs join, in join order (pid before mnt: setns(mnt) changes
/// the root, and the pid ns is entered by the next fork anyway).
pub const EXEC_NS: [&str; 6] = ["net", "ipc", "uts", "cgroup", "pid", "mnt"];

/// Child side: sends its own namespaces, except those it shares with the
/// agent (joining those is a no-op, and setns of one's own cgroup
/// namespace can even be refused).
pub fn report_namespaces(
    sock: BorrowedFd<'_>,
    shared_with_agent: &[&str],
) -> Result<(), SyncError> {
    let mut names = Vec::new();
    let mut fds = Vec::new();
    for name in EXEC_NS.iter().filter(|n| !shared_with_agent.contains(n)) {
        let path = format!("/proc/self/ns/{name}");
        let f = std::fs::File::open(&path).map_err(|source| SyncError::OpenNs {
            path: path.clone(),
            source,
        })?;
        names.push(name.to_string());
        fds.push(std::os::fd::OwnedFd::from(f));
    }
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    rund_proto::fdpass::send_msg(sock, &ChildMsg::Namespaces { names }, &borrowed)
        .map_err(SyncError::Send)
}

/// Child side: block until the agent sends a go byte (start, or resume
/// after a pause); false if it went away.
pub fn wait_go(sock: BorrowedFd<'_>) -> bool {
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
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd >= 3).collect();
    keep.sort_unstable();
    keep.dedup();
    // close_range over the gaps between the fds to keep: no /proc needed.
    let mut next: u32 = 3;
    for fd in keep.iter().map(|f| *f as u32) {
        if fd > next {
            // SAFETY: closes only fds outside `keep`, which nothing in this
            // freshly forked child uses.
            unsafe { libc::close_range(next, fd - 1, 0) };
        }
        next = fd + 1;
    }
    // SAFETY: as above, for everything above the last fd kept.
    unsafe { libc::close_range(next, u32::MAX, 0) };
}

pub fn raw<F: AsFd>(f: &F) -> RawFd {
    f.as_fd().as_raw_fd()
}
