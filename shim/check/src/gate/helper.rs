//! The gate's checker for the static shim. write_bw needs libibverbs, a
//! shared library loaded with dlopen, which a static binary cannot load
//! safely (its own libc against the node's): the measurement runs in the
//! dynamic `rund` binary (`rund helper write-bw`), which prints a
//! [`WriteBwReply`] as JSON. The port's speed and state are read from sysfs
//! here.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::checker::DeviceChecker;
use super::policy::{port_state_from_sysfs, rated_mib_from_sysfs};
use crate::engine::params::WriteBwParams;
use crate::engine::report::BwReport;
use crate::error::CheckError;

/// The helper's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteBwReply {
    Measured(BwReport),
    Failed(String),
}

impl WriteBwReply {
    pub fn from_result(r: Result<BwReport, CheckError>) -> Self {
        match r {
            Ok(b) => Self::Measured(b),
            Err(e) => Self::Failed(e.to_string()),
        }
    }
}

/// The options the gate sets, as `rund helper write-bw` takes them.
pub fn helper_args(device: &str, p: &WriteBwParams) -> Vec<String> {
    let mut a = vec![
        "helper".into(),
        "write-bw".into(),
        "--device".into(),
        device.into(),
        "--size".into(),
        p.size.to_string(),
        "--iters".into(),
        p.iters.to_string(),
        "--ib-port".into(),
        p.ib_port.to_string(),
    ];
    if let Some(g) = p.gid_index {
        a.extend(["--gid-index".into(), g.to_string()]);
    }
    a
}

/// `rund helper write-bw`: write_bw on the real verbs backend, the reply as JSON.
#[cfg(feature = "verbs")]
pub fn serve(device: &str, params: &WriteBwParams) -> Vec<u8> {
    let r = super::VerbsChecker::real().measure(device, params);
    serde_json::to_vec(&WriteBwReply::from_result(r)).unwrap_or_default()
}

/// write_bw in a `rund helper write-bw` process.
pub struct HelperChecker {
    /// The dynamic `rund` binary.
    pub program: PathBuf,
    /// Normally /sys.
    pub sysfs_root: PathBuf,
    /// A wedged device must not hold a Create forever.
    pub deadline: Duration,
}

impl DeviceChecker for HelperChecker {
    fn measure(&self, device: &str, params: &WriteBwParams) -> Result<BwReport, CheckError> {
        let program = self.program.display();
        let mut cmd = Command::new(&self.program);
        cmd.args(helper_args(device, params));
        let out = rund_sys::helper::run(&mut cmd, b"", self.deadline)
            .map_err(|e| CheckError::Helper(format!("{program}: {e}")))?;
        if out.timed_out {
            return Err(CheckError::Helper(format!(
                "{program}: no result in {} s; killed",
                self.deadline.as_secs()
            )));
        }
        match serde_json::from_slice::<WriteBwReply>(&out.stdout) {
            Ok(WriteBwReply::Measured(r)) => Ok(r),
            Ok(WriteBwReply::Failed(why)) => Err(CheckError::Helper(why)),
            Err(_) => Err(CheckError::Helper(format!(
                "{program} {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }

    fn rated_mib_per_sec(&self, device: &str, port: u8) -> Option<f64> {
        rated_mib_from_sysfs(&self.sysfs_root, device, port)
    }

    fn port_state(&self, device: &str, port: u8) -> Option<String> {
        port_state_from_sysfs(&self.sysfs_root, device, port)
    }
}

#[cfg(test)]
mod tests;
