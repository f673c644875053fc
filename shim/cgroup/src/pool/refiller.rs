//! The background refiller: one thread per process, fed by claims, and
//! started by the first claim that asks for a refill (most per-pod shims
//! never do, and a thread made on every start costs a clone, a stack mapping
//! and the mm lock they take). The refill itself runs under the per-parent
//! file lock, so one refiller per parent runs on the node at a time.

use super::Pool;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, Weak};

/// The refiller of a process: off, allowed but not started, or running.
#[derive(Debug, Default)]
pub(crate) enum Lazy {
    #[default]
    Off,
    Armed(Weak<Pool>),
    Running(Handle),
}

impl Lazy {
    /// Allow a refiller; the thread starts on the first request.
    pub(crate) fn arm(&mut self, pool: Weak<Pool>) {
        if matches!(self, Lazy::Off) {
            *self = Lazy::Armed(pool);
        }
    }

    /// Queue `parent`, starting the thread if it is not running yet.
    pub(crate) fn request(&mut self, parent: &Path) {
        if let Lazy::Armed(pool) = self {
            *self = Lazy::Running(Handle::spawn(pool.clone()));
        }
        if let Lazy::Running(h) = self {
            h.request(parent);
        }
    }

    pub(crate) fn handle(&self) -> Option<&Handle> {
        match self {
            Lazy::Running(h) => Some(h),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    queued: BTreeSet<PathBuf>,
    busy: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Handle {
    tx: Sender<PathBuf>,
    pending: Arc<(Mutex<Pending>, Condvar)>,
}

impl Handle {
    pub(crate) fn spawn(pool: Weak<Pool>) -> Self {
        let (tx, rx) = channel::<PathBuf>();
        let pending: Arc<(Mutex<Pending>, Condvar)> = Arc::default();
        let p2 = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("rund-cgroup-refill".into())
            .spawn(move || {
                // Ends when the pool (the only Sender owner) is dropped.
                while let Ok(parent) = rx.recv() {
                    {
                        let mut g = p2.0.lock().unwrap_or_else(|e| e.into_inner());
                        g.queued.remove(&parent);
                        g.busy = true;
                    }
                    if let Some(pool) = pool.upgrade() {
                        if let Err(e) = pool.refill(&parent) {
                            tracing::warn!(parent = %parent.display(), %e, "cgroup pool refill failed");
                        }
                    }
                    let mut g = p2.0.lock().unwrap_or_else(|e| e.into_inner());
                    g.busy = false;
                    p2.1.notify_all();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(%e, "cannot start the cgroup pool refiller; refills happen on demand only");
        }
        Handle { tx, pending }
    }

    pub(crate) fn request(&self, parent: &Path) {
        let mut g = self.pending.0.lock().unwrap_or_else(|e| e.into_inner());
        // One queued request per parent is enough.
        if g.queued.insert(parent.to_path_buf()) && self.tx.send(parent.to_path_buf()).is_err() {
            g.queued.remove(parent);
        }
    }

    pub(crate) fn wait_idle(&self) {
        let mut g = self.pending.0.lock().unwrap_or_else(|e| e.into_inner());
        while g.busy || !g.queued.is_empty() {
            g = self.pending.1.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}
