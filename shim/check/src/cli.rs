//! `rund check write-bw`: ib_write_bw's report for one device or all of them.

use std::io::Write;

use serde::Serialize;

use crate::clock::Clock;
use crate::engine::params::{SysInfo, WriteBwParams};
use crate::engine::report::{self, BwReport, RESULT_LINE};
use crate::engine::{limit_passed, run_write_bw};
use crate::error::CheckError;
use crate::memlock::RlimitSource;
use crate::verbs::{MemKind, VerbsProvider};

/// Options, named as perftest's.
#[derive(Debug, Clone, clap::Args)]
pub struct WriteBwArgs {
    /// RDMA device (e.g. mlx5_0), or `all`.
    #[arg(long, short = 'd', default_value = "all")]
    pub device: String,
    /// Message size in bytes (default 65536).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Iterations (default 5000).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run sizes from 2 B to 8 MiB.
    #[arg(short = 'a', long = "all")]
    pub all_sizes: bool,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u32>,
    /// Fail unless BW average reaches this (MiB/s, or Gb/s with --report-gbits).
    #[arg(long = "limit-bw", visible_alias = "limit_bw")]
    pub limit_bw: Option<f64>,
    /// Report Gb/s instead of MiB/s.
    #[arg(long = "report-gbits", visible_alias = "report_gbits")]
    pub report_gbits: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (RoCE); without it the IPv4-mapped RoCE v2 GID is picked, as perftest does.
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Register CUDA memory of this GPU (needs the `cuda` feature).
    #[arg(long = "use-cuda")]
    pub use_cuda: Option<i32>,
}

impl WriteBwArgs {
    pub fn params(&self) -> WriteBwParams {
        let d = WriteBwParams::default();
        WriteBwParams {
            size: self.size.unwrap_or(d.size),
            iters: self.iters.unwrap_or(d.iters),
            run_all: self.all_sizes,
            duration: self.duration,
            limit_bw: self.limit_bw,
            report_gbits: self.report_gbits,
            ib_port: self.ib_port,
            gid_index: self.gid_index,
            ..d
        }
    }
}

#[derive(Debug, Serialize)]
struct DeviceJson {
    device: String,
    results: Vec<BwReport>,
    error: Option<String>,
    limit_bw: Option<f64>,
    passed: bool,
}

/// Entry point for `rund check write-bw` with the real backend. Returns the exit status.
#[cfg(feature = "verbs")]
pub fn cli_main(args: WriteBwArgs) -> i32 {
    let out = std::io::stdout();
    let err = std::io::stderr();
    run_cli(
        &args,
        &crate::verbs::real::RealProvider,
        &crate::clock::MonotonicClock::new(),
        &crate::memlock::ProcRlimit,
        &mut out.lock(),
        &mut err.lock(),
    )
}

/// Without the verbs backend there is nothing to measure.
#[cfg(not(feature = "verbs"))]
pub fn cli_main(_args: WriteBwArgs) -> i32 {
    eprintln!("rund-check was built without the verbs backend");
    1
}

/// The CLI over any backend (tests use the simulated one).
pub fn run_cli<P: VerbsProvider, C: Clock>(
    args: &WriteBwArgs,
    provider: &P,
    clock: &C,
    rlimit: &dyn RlimitSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let params = args.params();
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
