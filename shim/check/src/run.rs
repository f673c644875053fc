//! What `rund check write-bw` runs: write_bw on one device or all of them, printed as
//! ib_write_bw's report or as JSON. The command line itself lives in the `rund` binary.

use std::io::Write;

use serde::Serialize;

use crate::clock::Clock;
use crate::engine::params::{SysInfo, WriteBwParams};
use crate::engine::report::{self, BwReport, RESULT_LINE};
use crate::engine::{limit_passed, run_write_bw};
use crate::error::CheckError;
use crate::memlock::RlimitSource;
use crate::verbs::{MemKind, VerbsProvider};

/// One `write-bw` invocation.
#[derive(Debug, Clone)]
pub struct WriteBwRequest {
    /// A device name, or `all`.
    pub device: String,
    pub params: WriteBwParams,
    /// JSON instead of perftest's table.
    pub json: bool,
    /// Register CUDA memory of this GPU (needs the `cuda` feature).
    pub use_cuda: Option<i32>,
}

#[derive(Debug, Serialize)]
struct DeviceJson {
    device: String,
    results: Vec<BwReport>,
    error: Option<String>,
    limit_bw: Option<f64>,
    passed: bool,
}

/// `req` on the real backend; the exit status.
#[cfg(feature = "verbs")]
pub fn run_real(req: &WriteBwRequest, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    run_report(
        req,
        &crate::verbs::real::RealProvider,
        &crate::clock::MonotonicClock::new(),
        &crate::memlock::ProcRlimit,
        out,
        err,
    )
}

/// Without the verbs backend there is nothing to measure.
#[cfg(not(feature = "verbs"))]
pub fn run_real(_req: &WriteBwRequest, _out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let _ = writeln!(err, "rund-check was built without the verbs backend");
    1
}

/// `req` over any backend (tests use the simulated one); the exit status.
pub fn run_report<P: VerbsProvider, C: Clock>(
    args: &WriteBwRequest,
    provider: &P,
    clock: &C,
    rlimit: &dyn RlimitSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let params = args.params.clone();
    let resolved = match params.resolve(SysInfo::detect()) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "{e}");
            return 1;
        }
    };
    let devices = if args.device == "all" {
        match provider.device_names() {
            Ok(d) => d,
            Err(e) => {
                let _ = writeln!(err, "{e}");
                return 1;
            }
        }
    } else {
        vec![args.device.clone()]
    };
    let mem = match args.use_cuda {
        Some(device) => MemKind::Cuda { device },
        None => MemKind::Host,
    };
    let mut ok = true;
    let mut json = Vec::new();
    for dev_name in devices {
        let run = provider
            .open(&dev_name)
            .map_err(CheckError::from)
            .and_then(|mut d| run_write_bw(&mut d, clock, &resolved, rlimit, mem));
        let (results, error) = match run {
            Ok(r) => (r, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let passed = error.is_none() && limit_passed(&results, resolved.limit_bw);
        ok &= passed;
        if args.json {
            json.push(DeviceJson {
                device: dev_name,
                results,
                error,
                limit_bw: resolved.limit_bw,
                passed,
            });
            continue;
        }
        if let Some(e) = error {
            let _ = writeln!(err, "{e}");
            continue;
        }
        let _ = writeln!(out, "{RESULT_LINE}\n {dev_name}\n{RESULT_LINE}");
        let _ = writeln!(out, "{}", report::header(resolved.unit));
        for r in &results {
            let _ = writeln!(out, "{}", report::format_line(r));
        }
        let _ = writeln!(out, "{RESULT_LINE}");
        if !passed {
            let _ = writeln!(err, "Error: {dev_name}: BW result is below bw limit");
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&json) {
            Ok(s) => {
                let _ = writeln!(out, "{s}");
            }
            Err(e) => {
                let _ = writeln!(err, "{e}");
                return 1;
            }
        }
    }
    if ok {
        0
    } else {
        1
    }
}
