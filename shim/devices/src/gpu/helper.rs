//! Where GPU discovery runs. NVML is a shared library loaded with dlopen,
//! which a static binary cannot do safely (its own libc against the node's):
//! the static shim asks the dynamic `rund` binary (`rund helper nvml`) to run
//! it instead. The request is the shim's [`DeviceConfig`] as JSON on stdin,
//! the reply an [`NvmlReply`] as JSON on stdout.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::nvml::{probe_nvml, NvmlProbe};
use super::Gpu;
use crate::config::DeviceConfig;
use crate::error::{DeviceError, Result};

/// Finds the GPUs a request may pick from.
pub trait GpuSource {
    fn discover(&self, cfg: &DeviceConfig) -> Result<Vec<Gpu>>;
}

/// NVML loaded into this process (`rund devices`, the helper itself).
pub struct InProcessNvml;

impl GpuSource for InProcessNvml {
    fn discover(&self, cfg: &DeviceConfig) -> Result<Vec<Gpu>> {
        probe_nvml(cfg).map(|p| p.gpus)
    }
}

/// NVML in a `rund helper nvml` process.
pub struct NvmlHelper {
    /// The dynamic `rund` binary.
    pub program: PathBuf,
    /// NVML's init scans every GPU; a wedged driver must not hold a Create forever.
    pub deadline: Duration,
}

/// The helper's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NvmlReply {
    Probe(NvmlProbe),
    Unavailable { library: String, reason: String },
    CallFailed { call: String, reason: String },
    Failed { reason: String },
}

impl NvmlReply {
    fn from_result(r: Result<NvmlProbe>) -> Self {
        match r {
            Ok(p) => Self::Probe(p),
            Err(DeviceError::NvmlUnavailable { library, reason }) => {
                Self::Unavailable { library, reason }
            }
            Err(DeviceError::Nvml { call, reason }) => Self::CallFailed { call, reason },
            Err(e) => Self::Failed {
                reason: e.to_string(),
            },
        }
    }

    fn into_result(self, program: &str) -> Result<Vec<Gpu>> {
        match self {
            Self::Probe(p) => Ok(p.gpus),
            Self::Unavailable { library, reason } => {
                Err(DeviceError::NvmlUnavailable { library, reason })
            }
            Self::CallFailed { call, reason } => Err(DeviceError::Nvml { call, reason }),
            Self::Failed { reason } => Err(DeviceError::Helper {
                program: program.into(),
                reason,
            }),
        }
    }
}

/// `rund helper nvml`: `input` is a [`DeviceConfig`] as JSON; the reply as JSON.
pub fn serve(input: &[u8]) -> Vec<u8> {
    let reply = match serde_json::from_slice::<DeviceConfig>(input) {
        Ok(cfg) => NvmlReply::from_result(probe_nvml(&cfg)),
        Err(e) => NvmlReply::Failed {
            reason: format!("bad request: {e}"),
        },
    };
    serde_json::to_vec(&reply).unwrap_or_default()
}

impl GpuSource for NvmlHelper {
    fn discover(&self, cfg: &DeviceConfig) -> Result<Vec<Gpu>> {
        let program = self.program.display().to_string();
        let fail = |reason: String| DeviceError::Helper {
            program: program.clone(),
            reason,
        };
        let input = serde_json::to_vec(cfg).map_err(|e| fail(e.to_string()))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(["helper", "nvml"]);
        let out = rund_sys::helper::run(&mut cmd, &input, self.deadline)
            .map_err(|e| fail(format!("run: {e}")))?;
        if out.timed_out {
            return Err(fail(format!(
                "no answer in {} s; killed",
                self.deadline.as_secs()
            )));
        }
        match serde_json::from_slice::<NvmlReply>(&out.stdout) {
            Ok(reply) => reply.into_result(&program),
            Err(_) => Err(fail(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
