//! A recycle in two halves. A Delete waits only for the first (the cgroup
//! leaves its container's path by rename, about ten renames); the reset of
//! every limit and the publication of the slot can follow its reply.

use super::{v1, Pool, Released};
use crate::error::Result;
use std::sync::Arc;

/// What [`Pool::release_detached`] did.
#[derive(Debug)]
pub enum Releasing {
    /// Given back already (kept, removed, or recycled at once).
    Done(Released),
    /// Off its path; the slot's reset and publication remain.
    Pending(PendingRecycle),
}

/// The second half of a recycle: until it finishes, the slot is nobody's
/// (gc leaves it to its live process, and cleans up after a dead one).
/// Dropped unfinished, it finishes at once.
#[derive(Debug)]
#[must_use = "the slot is published only when this finishes"]
pub struct PendingRecycle {
    pool: Arc<Pool>,
    detached: Option<v1::Detached>,
}

impl PendingRecycle {
    pub(super) fn new(pool: Arc<Pool>, detached: v1::Detached) -> Self {
        PendingRecycle {
            pool,
            detached: Some(detached),
        }
    }

    /// Reset the limits and publish the slot (or remove the cgroup when
    /// that fails).
    pub fn finish(mut self) -> Result<Released> {
        let d = self.detached.take().expect("taken only here and in drop");
        v1::finish(&self.pool, d)
    }
}

impl Drop for PendingRecycle {
    fn drop(&mut self) {
        if let Some(d) = self.detached.take() {
            if let Err(e) = v1::finish(&self.pool, d) {
                tracing::warn!(%e, "finishing a dropped recycle");
            }
        }
    }
}
