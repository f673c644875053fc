//! The shim's gate: before an RDMA device is injected it must have a passing write_bw result
//! no older than the TTL, or the check runs first. Results are cached node-wide under a
//! per-device lock, so concurrent pod starts run each device's check once.

pub mod cache;
mod checker;
pub mod helper;
pub mod policy;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::engine::report::BwReport;
use cache::{Cache, CachedResult, Entry, Lookup, CACHE_VERSION};
pub use checker::{DeviceChecker, VerbsChecker};
pub use helper::{HelperChecker, WriteBwReply};
pub use policy::{Threshold, Verify};

pub const DEFAULT_STATE_DIR: &str = "/run/rund/checks";

/// Per-request policy (from the shim's config `[devices]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GatePolicy {
    pub verify: Verify,
    pub threshold: Threshold,
    /// A cached result older than this is measured again.
    pub ttl_secs: u64,
    /// Message size and iterations of the gate's run (perftest defaults).
    pub size: u64,
    pub iters: u64,
    pub ib_port: u8,
}

impl Default for GatePolicy {
    fn default() -> Self {
        Self {
            verify: Verify::Require,
            threshold: Threshold::default(),
            ttl_secs: 600,
            size: crate::engine::params::DEF_SIZE_BW,
            iters: crate::engine::params::DEF_ITERS_WB,
            ib_port: crate::engine::params::DEF_IB_PORT,
        }
    }
}

/// Where the gate keeps its results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GateConfig {
    pub state_dir: PathBuf,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    /// Measured below the threshold, or the check failed.
    Fail,
    /// No threshold could be computed (no rated speed) or the cache/state dir failed.
    Unverifiable,
    /// `verify = off`.
    Skipped,
}

/// The measured figures and the decision, for annotations and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateOutcome {
    pub device: String,
    pub verdict: Verdict,
    pub report: Option<BwReport>,
    pub error: Option<String>,
    pub threshold_mib: Option<f64>,
    pub rated_mib: Option<f64>,
    pub from_cache: bool,
    pub measured_at_unix: u64,
}

impl GateOutcome {
    /// One line with the figures, e.g. for a Create error or a log.
    pub fn summary(&self) -> String {
        let mut s = format!("{}: write_bw {:?}", self.device, self.verdict).to_lowercase();
        if let Some(r) = &self.report {
            s.push_str(&format!(
                ", BW average {:.2} MiB/s, peak {:.2} MiB/s, {:.6} Mpps ({} B x {})",
                r.bw_average_mib(),
                r.unit.factor() * r.bw_peak / 1_048_576.0,
                r.msg_rate_mpps,
                r.bytes,
                r.iterations
            ));
        }
        match (self.threshold_mib, self.rated_mib) {
            (Some(t), Some(rate)) => s.push_str(&format!(
                ", threshold {t:.2} MiB/s of rated {rate:.2} MiB/s"
            )),
            (Some(t), None) => s.push_str(&format!(", threshold {t:.2} MiB/s")),
            (None, _) if self.verdict == Verdict::Unverifiable && self.error.is_none() => {
                s.push_str(", no rated speed in sysfs to compute the threshold")
            }
            _ => {}
        }
        if let Some(e) = &self.error {
            s.push_str(&format!(": {e}"));
        }
        if self.from_cache {
            s.push_str(" (cached)");
        }
        s
    }

    /// Annotations to attach to the task.
    pub fn annotations(&self) -> Vec<(String, String)> {
        vec![(
            format!("rund.io/rdma-check.{}", self.device),
            self.summary(),
        )]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Under `require`: the device failed or could not be verified.
    #[error("RDMA device verification failed: {}", .0.summary())]
    Rejected(Box<GateOutcome>),
    #[error("invalid RDMA device name {0:?}")]
    InvalidDevice(String),
    #[error("RDMA check state dir {dir}: {source}")]
    State {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub struct Gate {
    cache: Cache,
    checker: Arc<dyn DeviceChecker>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Gate {
    /// The production gate: the real verbs backend.
    #[cfg(feature = "verbs")]
    pub fn new(config: &GateConfig) -> Self {
        Self::with_checker(config, Arc::new(VerbsChecker::real()))
    }

    /// Any checker (tests inject simulated or counting ones).
    pub fn with_checker(config: &GateConfig, checker: Arc<dyn DeviceChecker>) -> Self {
        Self {
            cache: Cache::new(&config.state_dir),
            checker,
        }
    }

    /// Makes sure `device` has a result no older than the TTL (measuring under the lock if
    /// not), then applies the policy.
    pub fn ensure(&self, device: &str, policy: &GatePolicy) -> Result<GateOutcome, GateError> {
        if policy.verify == Verify::Off {
            return Ok(GateOutcome {
                device: device.to_string(),
                verdict: Verdict::Skipped,
                report: None,
                error: None,
                threshold_mib: None,
                rated_mib: None,
                from_cache: false,
                measured_at_unix: 0,
            });
        }
        if !cache::valid_device_name(device) {
            return Err(GateError::InvalidDevice(device.to_string()));
        }
        if let Some(state) = self.checker.port_state(device, policy.ib_port) {
            if state != "ACTIVE" {
                let e = crate::error::CheckError::PortNotActive {
                    device: device.to_string(),
                    port: policy.ib_port,
                    state,
                };
                let out = self.outcome(device, None, Some(e.to_string()), policy, false, 0);
                return self.decide(out, policy);
            }
        }
        let (entry, from_cache) = match self.measure_cached(device, policy) {
            Ok(x) => x,
            Err(source) => {
                let e = GateError::State {
                    dir: self.cache.dir().to_path_buf(),
                    source,
                };
                if policy.verify == Verify::Warn {
                    tracing::warn!(device, error = %e, "RDMA check could not run; injecting anyway (verify = warn)");
                    let mut o = self.outcome(device, None, Some(e.to_string()), policy, false, 0);
                    o.verdict = Verdict::Unverifiable;
                    return Ok(o);
                }
                return Err(e);
            }
        };
        let (report, error) = match entry.result {
            CachedResult::Measured(r) => (Some(r), None),
            CachedResult::Failed(e) => (None, Some(e)),
        };
        let out = self.outcome(
            device,
            report,
            error,
            policy,
            from_cache,
            entry.measured_at_unix,
        );
        self.decide(out, policy)
    }

    fn decide(&self, out: GateOutcome, policy: &GatePolicy) -> Result<GateOutcome, GateError> {
        let device = out.device.as_str();
        match (out.verdict, policy.verify) {
            (Verdict::Pass, _) => {
                tracing::info!(device, result = %out.summary(), "RDMA device verified");
                Ok(out)
            }
            (_, Verify::Warn) => {
                tracing::warn!(device, result = %out.summary(), "RDMA device not verified; injecting anyway (verify = warn)");
                Ok(out)
            }
            _ => Err(GateError::Rejected(Box::new(out))),
        }
    }

    fn outcome(
        &self,
        device: &str,
        report: Option<BwReport>,
        error: Option<String>,
        policy: &GatePolicy,
        from_cache: bool,
        measured_at_unix: u64,
    ) -> GateOutcome {
        let rated_mib = self.checker.rated_mib_per_sec(device, policy.ib_port);
        let threshold_mib = policy.threshold.mib_per_sec(rated_mib);
        let verdict = match (&report, threshold_mib) {
            (None, _) => Verdict::Fail,
            (Some(_), None) => Verdict::Unverifiable,
            (Some(r), Some(t)) if r.bw_average_mib() >= t => Verdict::Pass,
            (Some(_), Some(_)) => Verdict::Fail,
        };
        GateOutcome {
            device: device.to_string(),
            verdict,
            report,
            error,
            threshold_mib,
            rated_mib,
            from_cache,
            measured_at_unix,
        }
    }

    /// Under the device lock: reuse a fresh, trustworthy entry or measure and store one.
    fn measure_cached(&self, device: &str, p: &GatePolicy) -> std::io::Result<(Entry, bool)> {
        let _lock = self.cache.lock(device)?;
        let now = unix_now();
        match self.cache.read(device)? {
            Lookup::Found(e)
                if e.size == p.size
                    && e.iters == p.iters
                    && e.measured_at_unix <= now
                    && now - e.measured_at_unix < p.ttl_secs =>
            {
                return Ok((e, true));
            }
            Lookup::Corrupt(why) => {
                tracing::warn!(device, why, "discarding corrupt RDMA check cache entry");
                self.cache.discard(device)?;
            }
            _ => {}
        }
        let params = crate::engine::params::WriteBwParams {
            size: p.size,
            iters: p.iters,
            ib_port: p.ib_port,
            ..Default::default()
        };
        let result = match self.checker.measure(device, &params) {
            Ok(r) => CachedResult::Measured(r),
            Err(e) => CachedResult::Failed(e.to_string()),
        };
        let entry = Entry {
            version: CACHE_VERSION,
            device: device.to_string(),
            measured_at_unix: now,
            size: p.size,
            iters: p.iters,
            result,
            checksum: String::new(),
        }
        .seal();
        self.cache.write(&entry)?;
        Ok((entry, false))
    }
}
