//! io on v2: BFQ's `io.bfq.weight` when the scheduler is there (same range
//! as blkio), else `io.weight` converted; throttles to `io.max`.

use super::need;
use crate::ctl::{self, write};
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxBlockIo;
use std::path::Path;

/// blkio.weight [10, 1000] to io.weight [1, 10000] (runc's conversion).
pub(crate) fn blkio_to_io_weight(w: u16) -> u64 {
    if w == 0 {
        return 0;
    }
    1 + (u64::from(w).saturating_sub(10)) * 9999 / 990
}

pub(super) fn apply(fs: &dyn CgroupFs, dir: &Path, b: &LinuxBlockIo) -> Result<()> {
    let throttles = [
        ("rbps", b.throttle_read_bps_device()),
        ("wbps", b.throttle_write_bps_device()),
        ("riops", b.throttle_read_iops_device()),
        ("wiops", b.throttle_write_iops_device()),
    ];
    let weight = b.weight().unwrap_or(0);
    let per_dev = b.weight_device().as_ref().is_some_and(|v| !v.is_empty());
    let any_throttle = throttles
        .iter()
        .any(|(_, l)| l.as_ref().is_some_and(|l| !l.is_empty()));
    if weight == 0 && !per_dev && !any_throttle {
        return Ok(());
    }
    need(fs, dir, "io")?;
    let bfq = fs.exists(&dir.join("io.bfq.weight"));
    if weight != 0 {
        if bfq {
            write(fs, dir, "io.bfq.weight", &weight.to_string())?;
        } else {
            write(
                fs,
                dir,
                "io.weight",
                &blkio_to_io_weight(weight).to_string(),
            )?;
        }
    }
    // Per-device weights exist only with BFQ from 5.4 on, where the file
    // reads "default N" plus device lines instead of a bare number.
    let bfq_per_dev =
        bfq && ctl::read(fs, dir, "io.bfq.weight").is_ok_and(|s| s.trim().parse::<u64>().is_err());
    if per_dev && !bfq_per_dev {
        tracing::warn!(
            "blockIO.weightDevice needs the BFQ scheduler with per-device weights; ignored"
        );
    }
    for d in b.weight_device().iter().flatten().filter(|_| bfq_per_dev) {
        if let Some(w) = d.weight() {
            let v = format!("{}:{} {w}", d.major(), d.minor());
            write(fs, dir, "io.bfq.weight", &v)?;
        }
    }
    for (key, list) in throttles {
        for t in list.iter().flatten() {
            let v = format!("{}:{} {key}={}", t.major(), t.minor(), t.rate());
            write(fs, dir, "io.max", &v)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn io_weight_conversion() {
        assert_eq!(super::blkio_to_io_weight(0), 0);
        assert_eq!(super::blkio_to_io_weight(10), 1);
        assert_eq!(super::blkio_to_io_weight(500), 4950);
        assert_eq!(super::blkio_to_io_weight(1000), 10_000);
    }
}
