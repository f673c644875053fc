//! The node keeper: the parent of the node's shim, and nothing more. It
//! holds a copy of every fd the node shim stashes ([`super::stash`]); if the
//! node shim dies other than by leaving, it starts the next one and hands it
//! those fds, so containerd's connections and the agents' sockets never see
//! a close. The agents of a dead node shim become the keeper's children:
//! it reaps them and tells the node shim their statuses.
//!
//! Single-threaded and blocking: a poll on the stash socket and a signalfd.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::{fork, ForkResult, Pid};

pub mod adopt;
pub mod inflight;
pub mod stash;

use crate::entry::flags::Flags;
use stash::{Item, Msg};

/// At most this many restarts within [`RESTART_WINDOW`]: a node shim that
/// keeps dying takes its pods down instead of looping.
const MAX_RESTARTS: usize = 5;
const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// What a new node shim gets from its keeper.
pub struct Handoff {
    /// Stash socket: the replay comes on it, then the shim's keeps go out.
    pub stash: OwnedFd,
    /// The keeper's news (reaped agents).
    pub news: OwnedFd,
    pub generation: u64,
}

/// Fds kept, by key, with the requests open on a connection by stream id:
/// a long poll's frame, or none for a request that is not replayed.
type Kept = BTreeMap<u64, (Item, Vec<OwnedFd>, BTreeMap<u32, Option<Vec<u8>>>)>;

/// Runs the keeper (forked by `start`); its stdout is `start`'s pipe until
/// the first node shim has it.
pub fn main(
    flags: Flags,
    control: String,
    log: PathBuf,
    serve: fn(Flags, String, PathBuf, Handoff) -> i32,
) -> i32 {
    crate::entry::set_subreaper();
    // `ps` and the tests tell the keeper from the node shim by name.
    let shim_name = comm();
    set_comm(c"rund-keeper");
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.add(Signal::SIGTERM);
    if mask.thread_block().is_err() {
        return 1;
    }
    let Ok(signals) = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
    else {
        return 1;
    };
    let mut kept = Kept::new();
    let mut restarts: VecDeque<Instant> = VecDeque::new();
    let mut generation = 0u64;
    loop {
        let Ok((ours, theirs)) = seqpacket() else {
            return 1;
        };
        let Ok((news, news_theirs)) = seqpacket() else {
            return 1;
        };
        let handoff = Handoff {
            stash: theirs,
            news: news_theirs,
            generation,
        };
        let keeper_fds: Vec<i32> = kept
            .values()
            .flat_map(|(_, fds, _)| fds.iter().map(|f| f.as_raw_fd()))
            .chain([signals.as_raw_fd(), ours.as_raw_fd(), news.as_raw_fd()])
            .collect();
        // SAFETY: the keeper is single-threaded, so the child may run anything.
        let server = match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                for fd in keeper_fds {
                    // SAFETY: closing the keeper's own fds in the child; the
                    // child exits without dropping their owners.
                    unsafe { libc::close(fd) };
                }
                let _ = mask.thread_unblock();
                set_comm(&shim_name);
                // SAFETY: PR_SET_PDEATHSIG only sets a flag on this process.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
                std::process::exit(serve(flags, control, log, handoff));
            }
            Ok(ForkResult::Parent { child }) => child,
            Err(_) => return 1,
        };
        drop(handoff);
        if generation == 0 {
            // `start` reads until the node shim closes the pipe: not ours.
            // SAFETY: dup2 onto fd 1; stderr is /dev/null for the process lifetime.
            unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
        }
        replay(&ours, &kept);
        // The keeper waits nearly all its life: its start-up pages can go.
        rund_sys::trim::trim_self();
        let (up, status) = watch(server, &ours, &news, &signals, &mut kept);
        let crashed = status != Ended::Exited(0);
        // The first node shim failing to start is `start`'s error; a later
        // one dying before it serves is a crash like any other.
        if (!up && generation == 0) || !crashed {
            if crashed {
                super::remove_node_files(&control);
            }
            return match status {
                Ended::Exited(code) => code,
                Ended::Signaled(_) => 1,
            };
        }
        let now = Instant::now();
        restarts.retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if restarts.len() >= MAX_RESTARTS {
            note(&log, &format!("node shim {status:?}: {MAX_RESTARTS} restarts within {RESTART_WINDOW:?}; giving up, its pods go with it"));
            // Its dead shims cannot remove their control socket and lock file.
            super::remove_node_files(&control);
            return 1;
        }
        restarts.push_back(now);
        generation += 1;
        note(
            &log,
            &format!(
                "node shim {status:?}; starting generation {generation} with {} kept fds",
                kept.len()
            ),
        );
    }
}

fn comm() -> std::ffi::CString {
    let name = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    std::ffi::CString::new(name.trim_end()).unwrap_or_default()
}

fn set_comm(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes
    // (longer ones are cut) and only renames this thread.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}

fn seqpacket() -> nix::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
}

/// Hands every kept fd to a new node shim, then the end of the replay.
fn replay(sock: &OwnedFd, kept: &Kept) {
    for (key, (item, fds, open)) in kept {
        let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        let msg = Msg::Keep {
            key: *key,
            item: item.clone(),
            pending: open.values().flatten().cloned().collect(),
            unanswered: open
                .iter()
                .filter(|(_, frame)| frame.is_none())
                .map(|(stream, _)| *stream)
                .collect(),
        };
        if stash::send(sock.as_fd(), &msg, &fds).is_err() {
            return;
        }
    }
    let _ = stash::send(sock.as_fd(), &Msg::Done, &[]);
}

/// Serves one node shim until it is gone: whether it was up, and how it ended.
fn watch(
    server: Pid,
    sock: &OwnedFd,
    news: &OwnedFd,
    signals: &SignalFd,
    kept: &mut Kept,
) -> (bool, Ended) {
    let mut up = false;
    let mut open = true;
    // A child that died while the last node shim was being reaped had its
    // SIGCHLD read with the shim's: reap before the first wait for a signal.
    let mut sweep = true;
    loop {
        if sweep {
            if let Some(status) = reap(server, news) {
                // What it sent before it died counts.
                while open && readable(sock) {
                    open = take(sock, kept, &mut up);
                }
                return (up, status);
            }
        }
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if open {
            fds.push(PollFd::new(sock.as_fd(), PollFlags::POLLIN));
        }
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        let sock_ready = fds
            .get(1)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty());
        if sock_ready {
            open = take(sock, kept, &mut up);
        }
        sweep = fds[0].revents().is_some_and(|r| !r.is_empty());
        if !sweep {
            continue;
        }
        while let Ok(Some(info)) = signals.read_signal() {
            if info.ssi_signo == Signal::SIGTERM as u32 {
                let _ = kill(server, Signal::SIGTERM);
            }
        }
    }
}

/// How a node shim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    /// Killed by this signal (a real-time one too).
    Signaled(i32),
}

/// Reaps dead children, telling the node shim of each agent's status, until
/// none is left or the node shim itself is among them: then how it ended
/// (the rest wait for the next sweep, whose news goes to the next node
/// shim). Raw waitpid: nix cannot decode a death by a real-time signal, and
/// an undecoded zombie would stop every later sweep.
fn reap(server: Pid, news: &OwnedFd) -> Option<Ended> {
    loop {
        let mut raw = 0;
        // SAFETY: waitpid only writes the status into our variable.
        let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
        if pid <= 0 {
            return None;
        }
        let ended = if libc::WIFEXITED(raw) {
            Ended::Exited(libc::WEXITSTATUS(raw))
        } else if libc::WIFSIGNALED(raw) {
            Ended::Signaled(libc::WTERMSIG(raw))
        } else {
            continue;
        };
        if pid == server.as_raw() {
            return Some(ended);
        }
        let status = match ended {
            Ended::Exited(code) => code as u32 & 0xff,
            Ended::Signaled(sig) => 128 + sig as u32,
        };
        let _ = stash::send(news.as_fd(), &Msg::Reaped { pid, status }, &[]);
    }
}

fn readable(sock: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// Takes one message from the node shim; false once its end is closed.
fn take(sock: &OwnedFd, kept: &mut Kept, up: &mut bool) -> bool {
    match stash::recv(sock.as_fd()) {
        Ok((Msg::Keep { key, item, .. }, fds)) if fds.len() == item.fds() => {
            kept.insert(key, (item, fds, BTreeMap::new()));
        }
        Ok((Msg::Release { key }, _)) => {
            kept.remove(&key);
        }
        Ok((Msg::Pending { key, stream, frame }, _)) => {
            if let Some((.., open)) = kept.get_mut(&key) {
                open.insert(stream, Some(frame));
            }
        }
        Ok((Msg::Open { key, stream }, _)) => {
            if let Some((.., open)) = kept.get_mut(&key) {
                open.insert(stream, None);
            }
        }
        Ok((Msg::Answered { key, stream }, _)) => {
            if let Some((.., open)) = kept.get_mut(&key) {
                open.remove(&stream);
            }
        }
        Ok((Msg::Up, _)) => *up = true,
        // Anything else (fds dropped with it) is a bug of the node shim's.
        Ok(_) => {}
        Err(rund_proto::fdpass::FdPassError::Closed) => return false,
        Err(_) => {}
    }
    true
}

/// One line in the node's log, beside the node shim's own.
fn note(log: &Path, line: &str) {
    let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .mode(0o600)
        .open(log)
    else {
        return;
    };
    let _ = writeln!(
        f,
        "{} WARN rund_shim::entry::node::keeper: {line}",
        now_secs()
    );
}

fn now_secs() -> String {
    let ns = crate::clock::now_ns();
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

#[cfg(test)]
mod tests;
