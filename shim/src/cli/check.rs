//! `rund check write-bw`: perftest's ib_write_bw options, run by rund-check.

use rund_check::{WriteBwParams, WriteBwRequest};

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
    pub fn request(&self) -> WriteBwRequest {
        let d = WriteBwParams::default();
        let params = WriteBwParams {
            size: self.size.unwrap_or(d.size),
            iters: self.iters.unwrap_or(d.iters),
            run_all: self.all_sizes,
            duration: self.duration,
            limit_bw: self.limit_bw,
            report_gbits: self.report_gbits,
            ib_port: self.ib_port,
            gid_index: self.gid_index,
            ..d
        };
        WriteBwRequest {
            device: self.device.clone(),
            params,
            json: self.json,
            use_cuda: self.use_cuda,
        }
    }
}

/// Runs the command on the real verbs backend; the exit status.
pub fn write_bw(args: &WriteBwArgs) -> i32 {
    let (out, err) = (std::io::stdout(), std::io::stderr());
    rund_check::run::run_real(&args.request(), &mut out.lock(), &mut err.lock())
}
