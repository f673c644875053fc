//! Bounds on numeric requests: `rund.io/memlock` and
//! `rund.io/grace-period-seconds`. Both are refused above the bound, never
//! clamped: a workload that silently gets less than it asked for fails
//! later, far from the cause.

use super::{PolicyConfig, PolicyError};
use crate::rlimit::memlock::parse_limit;
use crate::rlimit::RlimitError;

fn fmt_limit(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{v} bytes")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error(transparent)]
    Bad(#[from] RlimitError),
    #[error(transparent)]
    Refused(#[from] PolicyError),
}

/// Checks `rund.io/memlock` against `[policy] max_memlock`. Up to
/// `inherited` (the hard limit the pod gets anyway, which any process may
/// set for itself) needs no policy; above it, only up to `max_memlock`.
pub fn check_memlock(
    policy: &PolicyConfig,
    annotation: Option<&str>,
    inherited: u64,
) -> Result<(), LimitError> {
    let Some(v) = annotation else {
        return Ok(());
    };
    let want = parse_limit(rund_annotations::MEMLOCK, v)?;
    if want <= inherited {
        return Ok(());
    }
    let request = format!("annotation {}={v:?}", rund_annotations::MEMLOCK);
    let key = "[policy] max_memlock";
    let Some(max) = &policy.max_memlock else {
        let reason = format!(
            "it is unset, so no pod may raise RLIMIT_MEMLOCK above the {} it inherits",
            fmt_limit(inherited)
        );
        return Err(PolicyError::new(request, key, reason).into());
    };
    let max = parse_limit(key, max)?;
    if want > max {
        let reason = format!("{} is above the bound, {}", fmt_limit(want), fmt_limit(max));
        return Err(PolicyError::new(request, key, reason).into());
    }
    Ok(())
}

/// The hard RLIMIT_MEMLOCK this shim (and so every pod) inherits.
pub fn inherited_memlock() -> u64 {
    crate::rlimit::get(0, "RLIMIT_MEMLOCK")
        .map(|(_, hard)| hard)
        .unwrap_or(0)
}

/// The sandbox's grace period: `requested` (the annotation) if it is within
/// `[policy] max_grace_period_seconds` (or the node default, if larger),
/// else refused; `default` when nothing was requested.
pub fn grace_seconds(
    policy: &PolicyConfig,
    requested: Option<u32>,
    default: u32,
) -> Result<u32, PolicyError> {
    let Some(want) = requested else {
        return Ok(default);
    };
    let bound = policy.max_grace_period_seconds.max(default);
    if want > bound {
        return Err(PolicyError::new(
            format!("annotation {}=\"{want}\"", rund_annotations::GRACE_PERIOD),
            "[policy] max_grace_period_seconds",
            format!("{want} s is above the bound, {bound} s"),
        ));
    }
    Ok(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB8: u64 = 8 << 20;

    fn policy(max_memlock: Option<&str>) -> PolicyConfig {
        PolicyConfig {
            max_memlock: max_memlock.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn memlock_up_to_the_inherited_limit_needs_no_policy() {
        let p = policy(None);
        assert!(check_memlock(&p, None, MIB8).is_ok());
        assert!(check_memlock(&p, Some("65536"), MIB8).is_ok());
        assert!(check_memlock(&p, Some(&MIB8.to_string()), MIB8).is_ok());
        let e = check_memlock(&p, Some("unlimited"), MIB8)
            .unwrap_err()
            .to_string();
        for needle in [
            "rund.io/memlock=\"unlimited\"",
            "[policy] max_memlock",
            "8388608",
        ] {
            assert!(e.contains(needle), "{e}");
        }
        // A malformed value is bad input, not a refusal.
        let e = check_memlock(&p, Some("lots"), MIB8).unwrap_err();
        assert!(matches!(e, LimitError::Bad(_)), "{e}");
    }

    #[test]
    fn memlock_above_it_is_bounded_by_max_memlock() {
        let p = policy(Some("67108864"));
        assert!(check_memlock(&p, Some("67108864"), MIB8).is_ok());
        let e = check_memlock(&p, Some("unlimited"), MIB8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("above the bound, 67108864 bytes"), "{e}");
        assert!(check_memlock(&policy(Some("unlimited")), Some("unlimited"), MIB8).is_ok());
    }

    #[test]
    fn grace_is_refused_above_the_bound() {
        let p = PolicyConfig::default();
        assert_eq!(grace_seconds(&p, None, 30).unwrap(), 30);
        assert_eq!(grace_seconds(&p, Some(2), 30).unwrap(), 2);
        assert_eq!(grace_seconds(&p, Some(30), 30).unwrap(), 30);
        let e = grace_seconds(&p, Some(3600), 30).unwrap_err().to_string();
        for needle in [
            "rund.io/grace-period-seconds=\"3600\"",
            "max_grace_period_seconds",
            "30 s",
        ] {
            assert!(e.contains(needle), "{e}");
        }
        // The node's own default is always within reach.
        assert_eq!(grace_seconds(&p, Some(45), 60).unwrap(), 45);
        let p = PolicyConfig {
            max_grace_period_seconds: 600,
            ..Default::default()
        };
        assert_eq!(grace_seconds(&p, Some(600), 30).unwrap(), 600);
    }
}
