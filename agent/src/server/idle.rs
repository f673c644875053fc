//! The agent gives back its start-up pages once idle (the shim's `[idle]
//! trim_after_ms`, `rund_sys::trim`): after the last process started or
//! deleted has been quiet for that long.

use std::sync::Arc;
use std::time::Duration;

use rund_sys::trim::Quiet;

pub struct IdleTrim {
    after: Option<Duration>,
    quiet: Arc<Quiet>,
}

impl IdleTrim {
    pub fn new(after_ms: u64) -> Self {
        IdleTrim {
            after: (after_ms > 0).then(|| Duration::from_millis(after_ms)),
            quiet: Default::default(),
        }
    }

    pub fn activity(&self) {
        let Some(after) = self.after else { return };
        let quiet = self.quiet.clone();
        let ticket = quiet.activity();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            match quiet.trim_if_still(ticket) {
                Some(Ok(kb)) => crate::debug!("idle: unmapped {kb} kB of clean file pages"),
                Some(Err(e)) => crate::debug!("idle trim: {e}"),
                None => {}
            }
        });
    }
}
