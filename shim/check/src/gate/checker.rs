//! What the gate runs: a [`DeviceChecker`]. [`VerbsChecker`] runs write_bw through any verbs
//! provider (the real one in production, the simulated one in tests).

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::Clock;
use crate::engine::params::{SysInfo, WriteBwParams};
use crate::engine::report::BwReport;
use crate::error::CheckError;
use crate::memlock::RlimitSource;
use crate::verbs::{MemKind, VerbsError, VerbsProvider};

use super::policy::{port_state_from_sysfs, rated_mib_from_sysfs};

pub trait DeviceChecker: Send + Sync {
    /// Runs write_bw on `device`; one report (the gate uses a single size).
    fn measure(&self, device: &str, params: &WriteBwParams) -> Result<BwReport, CheckError>;
    /// The port's rated speed in MiB/s, if known.
    fn rated_mib_per_sec(&self, device: &str, port: u8) -> Option<f64>;
    /// The port's state now (e.g. `ACTIVE`, `DOWN`), if known: a cached pass does not let a
    /// port that went down through.
    fn port_state(&self, _device: &str, _port: u8) -> Option<String> {
        None
    }
}

pub struct VerbsChecker<P, C> {
    pub provider: P,
    pub clock: C,
    pub rlimit: Arc<dyn RlimitSource>,
    /// Normally /sys.
    pub sysfs_root: PathBuf,
}

#[cfg(feature = "verbs")]
impl VerbsChecker<crate::verbs::real::RealProvider, crate::clock::MonotonicClock> {
    pub fn real() -> Self {
        Self {
            provider: crate::verbs::real::RealProvider,
            clock: crate::clock::MonotonicClock::new(),
            rlimit: Arc::new(crate::memlock::ProcRlimit),
            sysfs_root: PathBuf::from("/sys"),
        }
    }
}

impl<P: VerbsProvider, C: Clock> DeviceChecker for VerbsChecker<P, C> {
    fn measure(&self, device: &str, params: &WriteBwParams) -> Result<BwReport, CheckError> {
        let r = params.resolve(SysInfo::detect())?;
        // Listing first gives "no RDMA devices found" rather than "device not found".
        self.provider.device_names()?;
        let mut dev = self.provider.open(device)?;
        let reports = crate::engine::run_write_bw(
            &mut dev,
            &self.clock,
            &r,
            self.rlimit.as_ref(),
            MemKind::Host,
        )?;
        reports
            .into_iter()
            .next()
            .ok_or(CheckError::Verbs(VerbsError::NoDevices))
    }

    fn rated_mib_per_sec(&self, device: &str, port: u8) -> Option<f64> {
        rated_mib_from_sysfs(&self.sysfs_root, device, port)
    }

    fn port_state(&self, device: &str, port: u8) -> Option<String> {
        port_state_from_sysfs(&self.sysfs_root, device, port)
    }
}
