//! RLIMIT_MEMLOCK preflight. Registration pins pages and counts them against the limit; when
//! it falls short, ibv_reg_mr fails with a bare ENOMEM ("Couldn't allocate MR"). We compare
//! first and say what is needed, what is in force, and how to fix it.

use std::io;

/// The rlimit seam (tests inject limits).
pub trait RlimitSource: Send + Sync {
    /// (soft, hard); `None` is RLIM_INFINITY.
    fn memlock(&self) -> io::Result<(Option<u64>, Option<u64>)>;
    /// Raises the soft limit (allowed up to the hard limit without privilege).
    fn set_memlock_soft(&self, soft: Option<u64>, hard: Option<u64>) -> io::Result<()>;
    /// Bytes this process has pinned already (VmPin), which count against the same limit.
    fn pinned_bytes(&self) -> u64;
}

/// The real process limits.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcRlimit;

fn lim(v: libc::rlim_t) -> Option<u64> {
    (v != libc::RLIM_INFINITY).then_some(v)
}

impl RlimitSource for ProcRlimit {
    fn memlock(&self) -> io::Result<(Option<u64>, Option<u64>)> {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the rlimit we own.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((lim(rl.rlim_cur), lim(rl.rlim_max)))
    }

    fn set_memlock_soft(&self, soft: Option<u64>, hard: Option<u64>) -> io::Result<()> {
        let rl = libc::rlimit {
            rlim_cur: soft.unwrap_or(libc::RLIM_INFINITY),
            rlim_max: hard.unwrap_or(libc::RLIM_INFINITY),
        };
        // SAFETY: setrlimit reads the rlimit we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn pinned_bytes(&self) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmPin:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MemlockError {
    #[error(
        "memlock preflight: registering the RDMA buffer needs {needed} bytes ({}) of locked memory{}, \
         but RLIMIT_MEMLOCK in force is {} (hard limit {}); {reason}. Fix: raise the limit of the \
         caller, e.g. LimitMEMLOCK=infinity in containerd.service (or the unit/ulimit -l that starts \
         rund), or run with a smaller -s and without -a",
        human(*needed),
        pinned_note(*pinned),
        human_lim(*soft),
        human_lim(*hard)
    )]
    Shortfall {
        needed: u64,
        pinned: u64,
        soft: Option<u64>,
        hard: Option<u64>,
        reason: String,
    },
    #[error("memlock preflight: getrlimit(RLIMIT_MEMLOCK) failed: {0}")]
    Query(#[source] io::Error),
}

fn pinned_note(pinned: u64) -> String {
    if pinned > 0 {
        format!(" on top of {pinned} bytes already pinned")
    } else {
        String::new()
    }
}

/// "16777216 bytes (16 MiB)"-style human form.
pub fn human(bytes: u64) -> String {
    const U: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, v) in U {
        if bytes >= v {
            let x = bytes as f64 / v as f64;
            return if bytes.is_multiple_of(v) {
                format!("{} {name}", bytes / v)
            } else {
                format!("{x:.1} {name}")
            };
        }
    }
    format!("{bytes} B")
}

fn human_lim(l: Option<u64>) -> String {
    match l {
        None => "unlimited".into(),
        Some(b) => format!("{b} bytes ({})", human(b)),
    }
}

/// Checks that `needed` more bytes can be pinned. If only the soft limit is short and the
/// hard limit suffices, the soft limit is raised (no privilege needed); otherwise one error
/// names both numbers and the fix.
pub fn preflight(needed: u64, src: &dyn RlimitSource) -> Result<(), MemlockError> {
    let (soft, hard) = src.memlock().map_err(MemlockError::Query)?;
    let pinned = src.pinned_bytes();
    let total = needed.saturating_add(pinned);
    let fits = |l: Option<u64>| l.is_none_or(|l| total <= l);
    if fits(soft) {
        return Ok(());
    }
    let reason = if fits(hard) {
        match src.set_memlock_soft(hard, hard) {
            Ok(()) => return Ok(()),
            Err(e) => format!("raising the soft limit to the hard limit failed: {e}"),
        }
    } else {
        // Raising the hard limit needs CAP_SYS_RESOURCE; try, in case we have it.
        match src.set_memlock_soft(Some(total), Some(total)) {
            Ok(()) => return Ok(()),
            Err(e) => format!(
                "the hard limit is below that, and raising it needs CAP_SYS_RESOURCE \
                 (setrlimit: {e})"
            ),
        }
    };
    Err(MemlockError::Shortfall {
        needed,
        pinned,
        soft,
        hard,
        reason,
    })
}
