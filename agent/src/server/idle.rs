//! The agent gives back its start-up pages once idle (the shim's `[idle]
//! trim_after_ms`, `rund_sys::trim`): after the last process started or
//! deleted has been quiet for that long.

use std::time::Duration;

pub struct IdleTrim {
    after: Duration,
}

impl IdleTrim {
    pub fn new(after_ms: u64) -> Self {
        IdleTrim {
            after: Duration::from_millis(after_ms),
        }
    }

    /// The process's trimmer thread trims once this has been quiet for `after`.
    pub fn activity(&self) {
        rund_sys::trim::activity(self.after);
    }
}
