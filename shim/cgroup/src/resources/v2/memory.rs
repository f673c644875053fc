//! memory on v2: `memory.max`, `memory.swap.max` (swap only, not
//! memory+swap) and `memory.low`, as runc converts them.

use super::need;
use crate::ctl::{self, write};
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxMemory;
use std::path::Path;

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidResource {
        field: "memory.swap",
        reason: reason.into(),
    }
}

/// OCI `swap` is memory+swap; v2's `memory.swap.max` is swap alone
/// (runc's ConvertMemorySwapToCgroupV2Value). -1 means unlimited, 0 unset.
pub(crate) fn swap_to_v2(swap: i64, limit: i64) -> Result<i64> {
    match (swap, limit) {
        // Unlimited memory and no swap given: unlimited swap too, as on v1.
        (0, -1) => Ok(-1),
        (-1 | 0, _) => Ok(swap),
        (_, -1) => Ok(swap),
        (_, 0) => Err(invalid("a swap limit needs a memory limit on cgroup v2")),
        (_, l) if l < 0 => Err(invalid(format!("memory.limit {l} is invalid"))),
        (s, l) if s < l => Err(invalid(format!(
            "{s} is below memory.limit {l} (swap is memory+swap)"
        ))),
        (s, l) => Ok(s - l),
    }
}

/// `-1` is `max`; `0` is "leave it".
fn num(v: i64) -> Option<String> {
    match v {
        0 => None,
        -1 => Some("max".into()),
        v => Some(v.to_string()),
    }
}

pub(super) fn apply(fs: &dyn CgroupFs, dir: &Path, m: &LinuxMemory) -> Result<()> {
    let limit = m.limit().unwrap_or(0);
    let swap = m.swap().unwrap_or(0);
    let reservation = m.reservation().unwrap_or(0);
    if m.kernel().is_some() || m.kernel_tcp().is_some() {
        tracing::warn!("memory.kernel/kernelTCP have no cgroup v2 equivalent; ignored");
    }
    // runc's fs2 driver ignores both: v2 has no per-cgroup swappiness, and
    // the OOM killer cannot be turned off for a cgroup.
    if m.swappiness().is_some() {
        tracing::warn!("memory.swappiness has no cgroup v2 equivalent; ignored");
    }
    if m.disable_oom_killer() == Some(true) {
        tracing::warn!("memory.disableOOMKiller has no cgroup v2 equivalent; ignored");
    }
    if limit == 0 && swap == 0 && reservation == 0 {
        return Ok(());
    }
    need(fs, dir, "memory")?;
    // As runc's CheckMemoryUsage: v2 takes any memory.max and OOM-kills to
    // meet it, so a caller that asks gets a refusal instead.
    if m.check_before_update() == Some(true) && (limit > 0 || swap > 0) {
        let usage = ctl::read_u64(fs, dir, "memory.current")?;
        for (field, v) in [("memory.swap", swap), ("memory.limit", limit)] {
            if v > 0 && v as u64 <= usage {
                return Err(Error::InvalidResource {
                    field,
                    reason: format!("{v} is not above usage {usage}"),
                });
            }
        }
    }
    let sw = swap_to_v2(swap, limit)?;
    // memory == swap: no swap at all, "0" (not "leave it").
    let sw = match num(sw) {
        None if swap > 0 => Some("0".to_string()),
        other => other,
    };
    if let Some(v) = sw {
        // Without swap accounting the file is absent: nothing to do for
        // "max" or "0", as runc decides.
        if fs.exists(&dir.join("memory.swap.max")) || !(v == "max" || v == "0") {
            write(fs, dir, "memory.swap.max", &v)?;
        }
    }
    if let Some(v) = num(limit) {
        write(fs, dir, "memory.max", &v)?;
    }
    if let Some(v) = num(reservation) {
        write(fs, dir, "memory.low", &v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::swap_to_v2;

    #[test]
    fn runc_swap_cases() {
        // runc's TestConvertMemorySwapToCgroupV2Value.
        for (swap, mem, want) in [
            (0, 0, Some(0)),
            (-1, 0, Some(-1)),
            (-1, -1, Some(-1)),
            (0, -1, Some(-1)),
            (-1, 1000, Some(-1)),
            (1000, -1, Some(1000)),
            (1000, 0, None),
            (1000, 1000, Some(0)),
            (2000, 1000, Some(1000)),
            (1000, 2000, None),
            (1000, -2, None),
        ] {
            let got = swap_to_v2(swap, mem).ok();
            assert_eq!(got, want, "swap {swap} memory {mem}");
        }
    }
}
