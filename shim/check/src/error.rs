//! Errors of a write_bw run.

use crate::memlock::MemlockError;
use crate::verbs::VerbsError;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Memlock(#[from] MemlockError),
    /// What the write_bw helper process reported (its own error, as text).
    #[error("{0}")]
    Helper(String),
    #[error("invalid write_bw parameters: {0}")]
    Params(String),
    #[error("port {port} of {device} is {state}, not ACTIVE")]
    PortNotActive {
        device: String,
        port: u8,
        state: String,
    },
    /// Any completion status other than success fails the run (as perftest does).
    #[error(
        "{device}: completion with error: status {status_name} ({status}), vendor_err {vendor_err:#x}, \
         wr #{wr_id}, size {size} B, after {posted} posted / {completed} completed"
    )]
    Completion {
        device: String,
        status: u32,
        status_name: &'static str,
        vendor_err: u32,
        wr_id: u64,
        size: u64,
        posted: u64,
        completed: u64,
    },
    #[error("{device}: BW average {measured:.2} {unit} is below the limit {limit:.2} {unit}")]
    BelowLimit {
        device: String,
        measured: f64,
        limit: f64,
        unit: &'static str,
    },
}
