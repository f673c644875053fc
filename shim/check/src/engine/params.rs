//! perftest's parameters for ib_write_bw and its `force_dependecies` rules.

use crate::engine::report::ReportUnit;
use crate::error::CheckError;

/// perftest constants (perftest_parameters.h).
pub const DEF_SIZE_BW: u64 = 65536;
pub const DEF_ITERS_WB: u64 = 5000;
pub const DEF_TX_BW: u32 = 128;
pub const DEF_CQ_MOD: u32 = 100;
pub const DISABLED_CQ_MOD_VALUE: u32 = 1;
pub const MSG_SIZE_CQ_MOD_LIMIT: u64 = 8192;
/// `-a` runs sizes 2^1 .. 2^23.
pub const MAX_SIZE: u64 = 8_388_608;
pub const MIN_ITER: u64 = 5;
pub const MAX_ITER: u64 = 100_000_000;
pub const MAX_TX: u32 = 15000;
pub const MAX_CQ_MOD: u32 = 1024;
pub const DEF_CACHE_LINE_SIZE: u64 = 64;
pub const DEF_IB_PORT: u8 = 1;
pub const DEF_DURATION: u32 = 5;
pub const DEF_NUM_QPS: u64 = 1;
/// Peak is computed up to this many iterations (perftest's `-N` help text); beyond, the
/// O(n²/cq_mod) scan is skipped and peak is reported as 0.
pub const MAX_PEAK_ITERS: u64 = 20000;

/// User-facing options, defaults as perftest.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteBwParams {
    pub size: u64,
    pub iters: u64,
    pub tx_depth: u32,
    /// `-Q`: an explicitly requested cq_mod (perftest's `req_cq_mod`).
    pub cq_mod: Option<u32>,
    /// `-a`: sizes 2 B .. 8 MiB.
    pub run_all: bool,
    /// `-D secs`.
    pub duration: Option<u32>,
    /// `-f`: margin in seconds; perftest's default is duration / 4.
    pub margin: Option<u32>,
    pub report_gbits: bool,
    /// `--limit_bw`, in the report's unit.
    pub limit_bw: Option<f64>,
    pub ib_port: u8,
    /// GID index for RoCE (GRH); `None` picks one as perftest does.
    pub gid_index: Option<u32>,
}

impl Default for WriteBwParams {
    fn default() -> Self {
        Self {
            size: DEF_SIZE_BW,
            iters: DEF_ITERS_WB,
            tx_depth: DEF_TX_BW,
            cq_mod: None,
            run_all: false,
            duration: None,
            margin: None,
            report_gbits: false,
            limit_bw: None,
            ib_port: DEF_IB_PORT,
            gid_index: None,
        }
    }
}

/// Iterations or duration (with perftest's margin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestType {
    Iterations,
    Duration { secs: u32, margin: u32 },
}

/// Page size and cache line, as perftest reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysInfo {
    pub page_size: u64,
    pub cache_line: u64,
}

impl SysInfo {
    /// sysconf(_SC_PAGESIZE); cache line from sysconf(_SC_LEVEL1_DCACHE_LINESIZE), then
    /// /sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size, then 64.
    pub fn detect() -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        // SAFETY: as above.
        let l1 = unsafe { libc::sysconf(libc::_SC_LEVEL1_DCACHE_LINESIZE) };
        let sysfs = std::fs::read_to_string(
            "/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size",
        )
        .ok();
        Self {
            page_size: if page > 0 { page as u64 } else { 4096 },
            cache_line: cache_line_from(l1 as i64, sysfs.as_deref()),
        }
    }
}

/// perftest's `get_cache_line_size`: sysconf value if non-zero, else the sysfs file
/// (atoi), and 64 when the result is not positive.
pub fn cache_line_from(sysconf: i64, sysfs: Option<&str>) -> u64 {
    let mut size = sysconf;
    if size == 0 {
        size = match sysfs {
            Some(s) => atoi(s),
            None => return DEF_CACHE_LINE_SIZE,
        };
    }
    if size <= 0 {
        DEF_CACHE_LINE_SIZE
    } else {
        size as u64
    }
}

fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let end = t
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || (*i == 0 && (*c == '-' || *c == '+'))))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    t[..end].parse().unwrap_or(0)
}

/// `INC(size, cache_line)`: round up to a multiple of the cache line.
pub fn inc(size: u64, cache_line: u64) -> u64 {
    size.div_ceil(cache_line) * cache_line
}

/// perftest's buffer: `INC(max(size, page), cache_line) × 2 × num_qps`.
pub fn buffer_bytes(size: u64, sys: SysInfo, num_qps: u64) -> u64 {
    inc(size.max(sys.page_size), sys.cache_line) * 2 * num_qps
}

/// Parameters after perftest's dependency rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The sizes to run: one, or 2..2^23 with `-a`.
    pub sizes: Vec<u64>,
    /// 0 in duration mode, as perftest.
    pub iters: u64,
    pub tx_depth: u32,
    pub cq_mod: u32,
    pub test: TestType,
    pub no_peak: bool,
    pub unit: ReportUnit,
    pub limit_bw: Option<f64>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
    pub sys: SysInfo,
    /// Bytes registered: sized for the largest message.
    pub buffer_bytes: u64,
    /// perftest's `cycle_buffer` (the page size): small messages cycle through it.
    pub cycle_buffer: u64,
}

impl WriteBwParams {
    /// Validates ranges and applies perftest's `force_dependecies` (the parts that apply to
    /// a unidirectional RC write_bw with one QP and post_list 1).
    pub fn resolve(&self, sys: SysInfo) -> Result<Resolved, CheckError> {
        let bad = |m: String| Err(CheckError::Params(m));
        if !self.run_all && (self.size == 0 || self.size > MAX_SIZE) {
            return bad(format!(
                "size {} must be between 1 and {MAX_SIZE}",
                self.size
            ));
        }
        if self.duration.is_none() && !(MIN_ITER..=MAX_ITER).contains(&self.iters) {
            return bad(format!(
                "iterations {} must be between {MIN_ITER} and {MAX_ITER}",
                self.iters
            ));
        }
        if self.tx_depth == 0 || self.tx_depth > MAX_TX {
            return bad(format!(
                "tx_depth {} must be between 1 and {MAX_TX}",
                self.tx_depth
            ));
        }
        if let Some(q) = self.cq_mod {
            if q == 0 || q > MAX_CQ_MOD {
                return bad(format!("cq_mod {q} must be between 1 and {MAX_CQ_MOD}"));
            }
        }
        if let Some(l) = self.limit_bw {
            if !(l.is_finite() && l >= 0.0) {
                return bad(format!("limit_bw {l} must be a non-negative number"));
            }
        }
        let mut tx_depth = self.tx_depth;
        let mut iters = self.iters;
        let mut size = self.size;
        let mut cq_mod = self.cq_mod.unwrap_or(DEF_CQ_MOD);

        let test = match self.duration {
            None => TestType::Iterations,
            Some(0) => return bad("duration must be at least 1 second".into()),
            Some(secs) => {
                let margin = self.margin.unwrap_or(secs / 4);
                if u64::from(secs) <= 2 * u64::from(margin) {
                    return bad(format!(
                        "duration {secs}s must exceed twice the margin ({margin}s)"
                    ));
                }
                TestType::Duration { secs, margin }
            }
        };
        if test == TestType::Iterations && u64::from(tx_depth) > iters {
            tx_depth = iters as u32;
        }
        // Large messages signal every send, unless -a (cq_mod cannot follow the size) or an
        // explicit -Q.
        if size > MSG_SIZE_CQ_MOD_LIMIT && !self.run_all && self.cq_mod.is_none() {
            cq_mod = DISABLED_CQ_MOD_VALUE;
        }
        cq_mod = cq_mod.min(tx_depth);
        if self.run_all {
            size = MAX_SIZE;
        }
        let mut no_peak = false;
        if let TestType::Duration { .. } = test {
            if self.run_all {
                return bad("duration mode does not support running on all sizes (-a)".into());
            }
            iters = 0;
            no_peak = true;
        }
        if iters > MAX_PEAK_ITERS {
            no_peak = true;
        }
        let sizes = if self.run_all {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            vec![size]
        };
        Ok(Resolved {
            sizes,
            iters,
            tx_depth,
            cq_mod,
            test,
            no_peak,
            unit: if self.report_gbits {
                ReportUnit::Gbits
            } else {
                ReportUnit::MiB
            },
            limit_bw: self.limit_bw,
            ib_port: self.ib_port,
            gid_index: self.gid_index,
            sys,
            buffer_bytes: buffer_bytes(size, sys, DEF_NUM_QPS),
            cycle_buffer: sys.page_size,
        })
    }
}

impl Resolved {
    /// perftest's signalling rule for WR number `k` (0-based): every cq_mod-th WR, and the
    /// last one of an iterations run.
    pub fn is_signaled(&self, k: u64) -> bool {
        let q = u64::from(self.cq_mod);
        q == 1 || k % q == q - 1 || (self.test == TestType::Iterations && k + 1 == self.iters)
    }

    /// Local offset of WR `k` in the send half (perftest's `increase_loc_addr`): messages no
    /// bigger than half the cycle buffer walk through it in cache-line-aligned steps.
    pub fn msg_offset(&self, size: u64, k: u64) -> u64 {
        if size > self.cycle_buffer / 2 {
            return 0;
        }
        let step = inc(size, self.sys.cache_line);
        let slots = (self.cycle_buffer / step).max(1);
        (k % slots) * step
    }
}
