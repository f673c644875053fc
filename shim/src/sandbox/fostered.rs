//! Exit statuses of agents this process did not start: after a node shim
//! restart the agents are the keeper's children, so the keeper reaps them
//! and sends their statuses here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

/// How long an adopted agent's watcher waits for the keeper's word once the
/// agent is gone.
const WORD_LIMIT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Fostered {
    statuses: Mutex<HashMap<i32, u32>>,
    told: Notify,
}

impl Fostered {
    /// The keeper reaped `pid` with this status (128 + signal when killed).
    pub fn record(&self, pid: i32, status: u32) {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, status);
        self.told.notify_waiters();
    }

    /// The status of `pid`, once the keeper has reaped it; 255 if no word
    /// comes in time.
    pub async fn status(&self, pid: i32) -> u32 {
        self.reaped(pid).await.unwrap_or(255)
    }

    /// The status of `pid` if the keeper reaps it in time: whether an agent
    /// that cannot be reached is gone.
    pub async fn reaped(&self, pid: i32) -> Option<u32> {
        self.status_within(pid, WORD_LIMIT).await
    }

    async fn status_within(&self, pid: i32, limit: Duration) -> Option<u32> {
        let wait = async {
            loop {
                let told = self.told.notified();
                if let Some(s) = self
                    .statuses
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&pid)
                {
                    return s;
                }
                told.await;
            }
        };
        tokio::time::timeout(limit, wait).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_status_told_before_or_after_the_wait_is_found() {
        let f = std::sync::Arc::new(Fostered::default());
        f.record(7, 137);
        assert_eq!(f.status(7).await, 137);
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.status(8).await }
        });
        tokio::task::yield_now().await;
        f.record(8, 3);
        assert_eq!(waiter.await.unwrap(), 3);
    }

    #[tokio::test]
    async fn no_word_is_none() {
        let f = Fostered::default();
        f.record(8, 0);
        assert_eq!(f.status_within(9, Duration::from_millis(10)).await, None);
    }
}
