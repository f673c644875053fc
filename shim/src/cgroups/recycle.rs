//! The second half of a pool recycle (the reset of every limit and the
//! slot's publication), run after the Delete it belongs to has replied.
//! The server waits for every one before it exits, so no recycle is left
//! half done by a clean exit; a killed server leaves a marker that the
//! pool's gc cleans up.

use std::sync::Mutex;
use std::time::Duration;

use rund_cgroup::{CgroupManager, Destroyed};
use tokio::task::JoinHandle;

/// Recycles still finishing, in this process.
static FINISHING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Destroys `mgr`'s cgroup on one blocking thread: the answer comes once
/// the cgroup has left its path, and the same thread then finishes the
/// recycle (one hand-off, not two).
pub(super) async fn destroy(mgr: CgroupManager, path: String) -> rund_cgroup::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::task::spawn_blocking(move || match mgr.destroy_detached() {
        Ok(Destroyed::Recycling(pending)) => {
            let _ = tx.send(Ok(()));
            if let Err(e) = pending.finish() {
                tracing::warn!(path, "finishing the recycle: {e}");
            }
        }
        Ok(Destroyed::Done(_)) => drop(tx.send(Ok(()))),
        Err(e) => drop(tx.send(Err(e))),
    });
    {
        let mut all = FINISHING.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|t| !t.is_finished());
        all.push(task);
    }
    rx.await.unwrap_or_else(|_| {
        Err(rund_cgroup::Error::State {
            path: Default::default(),
            reason: "the cgroup task ended without an answer".into(),
        })
    })
}

/// Waits (at most `limit`) for every recycle begun so far to finish.
pub async fn settle(limit: Duration) {
    let all = std::mem::take(&mut *FINISHING.lock().unwrap_or_else(|e| e.into_inner()));
    let left = all.iter().filter(|t| !t.is_finished()).count();
    let wait = async {
        for t in all {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(limit, wait).await.is_err() {
        tracing::warn!(left, "cgroup recycles still running at exit");
    }
}
