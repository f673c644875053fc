//! The agent is PID 1 of the sandbox: every child and every orphan is reaped
//! here, on SIGCHLD, and its exit is published to whoever waits for it.

pub mod status;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::unistd::Pid;
use tokio::sync::watch;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub status: u32,
    pub at_ns: i64,
}

pub type ExitRx = watch::Receiver<Option<Exit>>;

/// Unclaimed exits kept at most (orphans nobody asked about).
const MAX_UNCLAIMED: usize = 1024;

#[derive(Default)]
struct Inner {
    watched: HashMap<i32, watch::Sender<Option<Exit>>>,
    unclaimed: HashMap<i32, Exit>,
    order: VecDeque<i32>,
}

/// Exit table shared by the RPC handlers. The runtime is single-threaded, but
/// ttrpc wants `Send + Sync` services, hence the (uncontended) mutex.
#[derive(Clone, Default)]
pub struct Reaper {
    inner: Arc<Mutex<Inner>>,
}

impl Reaper {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts watching `pid`; if it was already reaped the receiver is ready.
    pub fn watch(&self, pid: Pid) -> ExitRx {
        let mut inner = self.lock();
        let early = inner.unclaimed.remove(&pid.as_raw());
        let (tx, rx) = watch::channel(early);
        inner.watched.insert(pid.as_raw(), tx);
        rx
    }

    /// Stops watching `pid` (its exit, if any, is dropped).
    pub fn forget(&self, pid: Pid) {
        let mut inner = self.lock();
        inner.watched.remove(&pid.as_raw());
        inner.unclaimed.remove(&pid.as_raw());
    }

    fn record(&self, pid: Pid, exit: Exit) {
        let mut inner = self.lock();
        if let Some(tx) = inner.watched.get(&pid.as_raw()) {
            let _ = tx.send(Some(exit));
            return;
        }
        inner.unclaimed.insert(pid.as_raw(), exit);
        inner.order.push_back(pid.as_raw());
        while inner.order.len() > MAX_UNCLAIMED {
            if let Some(old) = inner.order.pop_front() {
                inner.unclaimed.remove(&old);
            }
        }
    }

    /// Reaps every zombie now. Raw waitpid: nix cannot decode a death by a
    /// real-time signal, and an undecoded zombie would stop the loop.
    pub fn reap_all(&self) {
        loop {
            let mut raw = 0;
            // SAFETY: waitpid only writes the status into our variable.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if let Some(status) = status::encode(raw) {
                crate::debug!("reaped pid {pid}: status {status}");
                self.record(
                    Pid::from_raw(pid),
                    Exit {
                        status,
                        at_ns: now_ns(),
                    },
                );
            }
        }
    }

    /// Runs forever: reaps on every SIGCHLD.
    pub async fn run(self, mut sigchld: tokio::signal::unix::Signal) {
        loop {
            self.reap_all();
            if sigchld.recv().await.is_none() {
                return;
            }
        }
    }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
