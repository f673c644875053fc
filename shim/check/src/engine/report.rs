//! perftest's `print_report_bw` arithmetic and its output formats.

use serde::{Deserialize, Serialize};

const NS_PER_SEC: f64 = 1e9;

/// MiB/s (2^20 bytes) or Gb/s (10^9 bits), perftest's `format_factor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReportUnit {
    #[serde(rename = "MiB/s")]
    MiB,
    #[serde(rename = "Gb/s")]
    Gbits,
}

impl ReportUnit {
    pub fn factor(self) -> f64 {
        match self {
            ReportUnit::MiB => 1_048_576.0,
            ReportUnit::Gbits => 125_000_000.0,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            ReportUnit::MiB => "MiB/s",
            ReportUnit::Gbits => "Gb/s",
        }
    }
    /// Converts a MiB/s figure into this unit.
    pub fn from_mib(self, mib: f64) -> f64 {
        mib * 1_048_576.0 / self.factor()
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwReport {
    pub bytes: u64,
    pub iterations: u64,
    pub bw_peak: f64,
    pub bw_average: f64,
    pub msg_rate_mpps: f64,
    pub unit: ReportUnit,
    /// Δt of the measured window, in nanoseconds.
    pub elapsed_ns: u64,
    /// The RoCE GID index used (none on InfiniBand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_index: Option<u32>,
}

impl BwReport {
    /// BW average in MiB/s whatever the display unit (used by thresholds and the cache).
    pub fn bw_average_mib(&self) -> f64 {
        self.bw_average * self.unit.factor() / 1_048_576.0
    }
}

/// Timestamps of one run, as perftest keeps them: `tposted[i]` when WR i was posted and
/// `tcompleted[j]` when the completion crediting WR j was polled. With `no_peak`, only index
/// 0 of each is meaningful: the start and end of the measured window.
#[derive(Debug, Clone, Default)]
pub struct Timestamps {
    pub tposted: Vec<u64>,
    pub tcompleted: Vec<u64>,
}

/// The best per-completion interval (perftest's `opt_delta`), in ns, floor 1.
pub fn peak_delta(ts: &Timestamps, n: u64, cq_mod: u64) -> u64 {
    let tp = &ts.tposted;
    let tc = &ts.tcompleted;
    // perftest starts from tcompleted[0] - tposted[0]; when index 0 is not a completion
    // index that difference wraps to a huge value, so "infinity" is the same start.
    let mut opt = u64::MAX;
    let n = n as usize;
    let q = cq_mod.max(1) as usize;
    for (i, &tpi) in tp.iter().enumerate().take(n) {
        let mut j = (i + 1).div_ceil(q) * q - 1;
        while j < n {
            let t = tc[j].saturating_sub(tpi) / (j - i + 1) as u64;
            opt = opt.min(t);
            j += q;
        }
        // The last WR is signaled explicitly when n is not a multiple of cq_mod.
        if !n.is_multiple_of(q) {
            let j = n - 1;
            let t = tc[j].saturating_sub(tpi) / (j - i + 1) as u64;
            opt = opt.min(t);
        }
    }
    opt.max(1)
}

/// perftest's formulas: `BW_avg = size × iters / Δt / factor`, `MsgRate = iters / Δt / 10^6`,
/// `BW_peak = size / opt_delta / factor` (0 when peak is not measured).
pub fn compute(
    size: u64,
    iters: u64,
    cq_mod: u32,
    ts: &Timestamps,
    no_peak: bool,
    unit: ReportUnit,
) -> BwReport {
    let last = if no_peak || iters == 0 {
        0
    } else {
        iters as usize - 1
    };
    let sum = ts.tcompleted[last].saturating_sub(ts.tposted[0]).max(1);
    let factor = unit.factor();
    let bw_avg = (size as f64 * iters as f64 * NS_PER_SEC) / (sum as f64 * factor);
    let msg_rate = (iters as f64 * NS_PER_SEC) / (sum as f64 * 1e6);
    let bw_peak = if no_peak || iters == 0 {
        0.0
    } else {
        let d = peak_delta(ts, iters, u64::from(cq_mod));
        (size as f64 * NS_PER_SEC) / (d as f64 * factor)
    };
    BwReport {
        bytes: size,
        iterations: iters,
        bw_peak,
        bw_average: bw_avg,
        msg_rate_mpps: msg_rate,
        unit,
        elapsed_ns: sum,
        gid_index: None,
    }
}

pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// The column header of ib_write_bw.
pub fn header(unit: ReportUnit) -> &'static str {
    match unit {
        ReportUnit::MiB => {
            " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
        }
        ReportUnit::Gbits => {
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        }
    }
}

/// One result line, printf formats `REPORT_FMT` / `REPORT_FMT_EXT` of perftest.
pub fn format_line(r: &BwReport) -> String {
    if r.unit == ReportUnit::Gbits && r.bw_average < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.bytes, r.iterations, r.bw_peak, r.bw_average, r.msg_rate_mpps
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.bytes, r.iterations, r.bw_peak, r.bw_average, r.msg_rate_mpps
        )
    }
}
