//! The shim server's "time to go": set once (Shutdown, SIGTERM, the last
//! container gone), awaited by the serve loop.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub struct ExitSignal {
    notify: Notify,
    set: AtomicBool,
}

impl ExitSignal {
    pub fn signal(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Returns once `signal` was called, before or during the wait.
    pub async fn wait(&self) {
        loop {
            // Registered before the check, so a signal in between is not lost.
            let notified = self.notify.notified();
            if self.set.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn wakes_a_waiter_and_a_late_caller() {
        let s = Arc::new(ExitSignal::default());
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        tokio::task::yield_now().await;
        s.signal();
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("the waiter woke")
            .unwrap();
        // Already set: returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(10), s.wait())
            .await
            .expect("a late wait returns");
    }
}
