//! rund-check: a reimplementation of perftest's `ib_write_bw` (loopback RC, RDMA WRITE) used to
//! verify RDMA devices before rund injects them, plus the node-wide result cache and gate policy.
//!
//! Layout (one folder per concept):
//! - [`verbs`]: the `Verbs` backend trait, the real libibverbs backend (feature `verbs`) and a
//!   simulated backend with a controllable clock (feature `testing`);
//! - [`engine`]: perftest's parameter rules, the send loop, duration mode and the report;
//! - [`memlock`]: the RLIMIT_MEMLOCK preflight;
//! - [`gate`]: policy, cached results under a lock, the `Gate::ensure` API used by the shim;
//! - [`run`]: what `rund check write-bw` runs and prints (its command line is the `rund`
//!   binary's).

pub mod clock;
pub mod engine;
pub mod error;
pub mod gate;
pub mod memlock;
pub mod run;
pub mod verbs;

#[cfg(any(test, feature = "testing"))]
pub use clock::SimClock;
pub use clock::{Clock, MonotonicClock};
pub use engine::params::{Resolved, SysInfo, WriteBwParams};
pub use engine::report::{BwReport, ReportUnit};
pub use engine::run_write_bw;
pub use error::CheckError;
pub use gate::{
    DeviceChecker, Gate, GateConfig, GateError, GateOutcome, GatePolicy, HelperChecker, Threshold,
    VerbsChecker, Verdict, Verify,
};
pub use memlock::{MemlockError, ProcRlimit, RlimitSource};
pub use run::WriteBwRequest;
pub use verbs::{Verbs, VerbsError, VerbsProvider};
