//! Time source seam: the engine reads time only through [`Clock`], so tests drive a
//! `SimClock` (feature `testing`) deterministically while production uses the monotonic clock.

use std::time::Instant;

/// A nanosecond clock. Only differences between readings are meaningful.
pub trait Clock: Send + Sync {
    fn now_ns(&self) -> u64;
}

/// CLOCK_MONOTONIC through `Instant`, relative to the clock's creation.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    base: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(any(test, feature = "testing"))]
pub use sim::SimClock;

#[cfg(any(test, feature = "testing"))]
mod sim {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::Clock;

    /// A clock that only moves when told to. Clones share the same time, so the simulated
    /// device and the engine agree on "now".
    #[derive(Debug, Clone, Default)]
    pub struct SimClock {
        now: Arc<AtomicU64>,
    }

    impl SimClock {
        pub fn new() -> Self {
            Self::default()
        }

        pub fn advance(&self, ns: u64) {
            self.now.fetch_add(ns, Ordering::SeqCst);
        }

        /// Moves time forward to `t` (never backwards).
        pub fn advance_to(&self, t: u64) {
            self.now.fetch_max(t, Ordering::SeqCst);
        }
    }

    impl Clock for SimClock {
        fn now_ns(&self) -> u64 {
            self.now.load(Ordering::SeqCst)
        }
    }
}
