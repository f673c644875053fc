//! The second half of a pool recycle (the reset of every limit and the
//! slot's publication), run after the Delete it belongs to has replied.
//! A pod's server waits until none is running (every pod's, in a node
//! shim) before its connection to containerd closes, so containerd's
//! `delete` action never meets one half done; a killed server leaves a
//! marker that the pool's gc cleans up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rund_cgroup::{CgroupManager, Destroyed};
use tokio::sync::Notify;

/// Destroys still running in this process (every pod's, in a node shim).
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Told each time one ends.
static ENDED: Notify = Notify::const_new();

/// Destroys `mgr`'s cgroup on one blocking thread: the answer comes once
/// the cgroup has left its path, and the same thread then finishes the
/// recycle (one hand-off, not two).
pub(super) async fn destroy(mgr: CgroupManager, path: String) -> rund_cgroup::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let running = Running::begin();
    // Detached: RUNNING, not the handle, is what `settle` waits on.
    drop(tokio::task::spawn_blocking(move || {
        let _running = running;
        match mgr.destroy_detached() {
            Ok(Destroyed::Recycling(pending)) => {
                let _ = tx.send(Ok(()));
                if let Err(e) = pending.finish() {
                    tracing::warn!(path, "finishing the recycle: {e}");
                }
            }
            Ok(Destroyed::Done(_)) => drop(tx.send(Ok(()))),
            Err(e) => drop(tx.send(Err(e))),
        }
    }));
    rx.await.unwrap_or_else(|_| {
        Err(rund_cgroup::Error::State {
            path: Default::default(),
            reason: "the cgroup task ended without an answer".into(),
        })
    })
}

/// One running destroy, counted until dropped (a panic included).
struct Running;

impl Running {
    fn begin() -> Running {
        RUNNING.fetch_add(1, Ordering::AcqRel);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
        ENDED.notify_waiters();
    }
}

/// Waits (at most `limit`) until no destroy of this process is running,
/// the recycles that follow their replies included.
pub async fn settle(limit: Duration) {
    let idle = async {
        loop {
            let ended = ENDED.notified();
            if RUNNING.load(Ordering::Acquire) == 0 {
                return;
            }
            ended.await;
        }
    };
    if tokio::time::timeout(limit, idle).await.is_err() {
        let left = RUNNING.load(Ordering::Acquire);
        tracing::warn!(left, "cgroup recycles still running at exit");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settle_waits_until_every_running_destroy_has_ended() {
        let held = Running::begin();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = gate.recv();
            drop(held);
        });
        let waiting = tokio::spawn(settle(Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "settle ended while a destroy ran");
        go.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("settle ends once the destroy has")
            .unwrap();
        thread.join().unwrap();
    }

    #[tokio::test]
    async fn settle_gives_up_at_its_limit() {
        let held = Running::begin();
        tokio::time::timeout(Duration::from_secs(10), settle(Duration::from_millis(50)))
            .await
            .expect("settle returns at its limit, a destroy still running");
        assert!(RUNNING.load(Ordering::Acquire) > 0);
        drop(held);
    }
}
