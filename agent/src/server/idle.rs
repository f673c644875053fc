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

    /// A warm agent now waits for its pod: a node's pool may keep it for
    /// good, holding its start-up pages (about 1.4 MiB of text), so it trims after
    /// [`WAITING_FACTOR`] times `after`. A head start's Create comes well
    /// before that, and the pod's first Start sets the usual delay again.
    pub fn waiting(&self) {
        rund_sys::trim::activity(self.after.saturating_mul(WAITING_FACTOR));
    }
}

/// How many idle delays a waiting warm agent keeps its pages.
const WAITING_FACTOR: u32 = 8;
