//! What RDMA pods get for RLIMIT_MEMLOCK, decided from the limits in force,
//! CAP_SYS_RESOURCE and `[memlock]`. Pure: the probing is in `probe.rs`.

use std::fmt;

use serde::Serialize;

use crate::config::MemlockConfig;
use crate::rlimit::memlock::{self as shim_memlock, OnFailure};
use crate::rlimit::RlimitError;

/// An rlimit value; `Unlimited` is RLIM_INFINITY and compares above any byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    Bytes(u64),
    Unlimited,
}

impl Limit {
    /// From a raw `rlim_t`.
    pub fn from_raw(v: u64) -> Limit {
        if v == libc::RLIM_INFINITY {
            Limit::Unlimited
        } else {
            Limit::Bytes(v)
        }
    }

    /// `memlock.rdma_default`, parsed exactly as the shim parses it.
    pub fn parse(s: &str) -> Result<Limit, RlimitError> {
        shim_memlock::parse_limit("memlock.rdma_default", s).map(Limit::from_raw)
    }

    /// As `rlimit::set` prints it in its errors (raw bytes or "unlimited").
    fn raw(self) -> String {
        rund_sys::rlimit::show(match self {
            Limit::Unlimited => libc::RLIM_INFINITY,
            Limit::Bytes(b) => b,
        })
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: u64 = 1024;
        const MIB: u64 = 1024 * KIB;
        const GIB: u64 = 1024 * MIB;
        match *self {
            Limit::Unlimited => f.write_str("unlimited"),
            Limit::Bytes(b) if b >= GIB && b % GIB == 0 => write!(f, "{} GiB", b / GIB),
            Limit::Bytes(b) if b >= MIB && b % MIB == 0 => write!(f, "{} MiB", b / MIB),
            Limit::Bytes(b) if b >= KIB && b % KIB == 0 => write!(f, "{} KiB", b / KIB),
            Limit::Bytes(b) => write!(f, "{b} bytes"),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Unlimited => s.serialize_str("unlimited"),
            Limit::Bytes(b) => s.serialize_u64(*b),
        }
    }
}

/// The `[memlock]` section, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemlockPolicy {
    pub rdma_default: Limit,
    pub on_failure: OnFailure,
}

impl MemlockPolicy {
    pub fn from_config(c: &MemlockConfig) -> Result<Self, RlimitError> {
        Ok(MemlockPolicy {
            rdma_default: Limit::parse(&c.rdma_default)?,
            on_failure: OnFailure::parse(&c.on_failure)?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// At or below the hard limit: no privilege needed.
    Fits,
    /// Above the hard limit, raised with CAP_SYS_RESOURCE.
    Raised,
    /// Above the hard limit without the capability: Create fails.
    CreateFails,
    /// Above the hard limit without the capability: clamped to the hard limit.
    Clamped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemlockVerdict {
    pub requested: Limit,
    pub outcome: Outcome,
    /// What the pod's processes end up with (`None` when Create fails).
    pub pods_get: Option<Limit>,
    pub message: String,
    pub fix: Option<String>,
}

const FIX: &str = "LimitMEMLOCK=infinity in containerd.service (systemctl edit containerd, \
                   then restart it)";

/// Decides what an RDMA pod without an explicit RLIMIT_MEMLOCK gets, given the
/// hard limit the shim inherits and whether it holds CAP_SYS_RESOURCE.
pub fn memlock_verdict(
    policy: MemlockPolicy,
    hard: Limit,
    cap_sys_resource: bool,
) -> MemlockVerdict {
    let req = policy.rdma_default;
    let (outcome, pods_get, message, fix) = if req <= hard {
        let m = format!("{req} requested; within the hard limit {hard}: RDMA pods get {req}");
        (Outcome::Fits, Some(req), m, None)
    } else if cap_sys_resource {
        let m = format!(
            "{req} requested; above the hard limit {hard}, raised with CAP_SYS_RESOURCE: \
             RDMA pods get {req}"
        );
        (Outcome::Raised, Some(req), m, None)
    } else {
        let fix =
            format!("{FIX}; or set memlock.rdma_default (or rund.io/memlock) to at most {hard}");
        match policy.on_failure {
            OnFailure::Error => {
                // The exact text the shim's prlimit path returns.
                let err = RlimitError::CannotRaise {
                    kind: "RLIMIT_MEMLOCK".into(),
                    wanted: req.raw(),
                    soft: req.raw(),
                    current_hard: hard.raw(),
                };
                let m = format!(
                    "{req} requested; hard limit {hard} and no CAP_SYS_RESOURCE -> Create of \
                     RDMA pods will fail with: {err}"
                );
                (Outcome::CreateFails, None, m, Some(fix))
            }
            OnFailure::ClampWithWarning => {
                let m = format!(
                    "{req} requested; hard limit {hard} and no CAP_SYS_RESOURCE -> RDMA pods \
                     get {hard} (clamped, with a warning in the log and a task annotation)"
                );
                (Outcome::Clamped, Some(hard), m, Some(fix))
            }
        }
    };
    MemlockVerdict {
        requested: req,
        outcome,
        pods_get,
        message,
        fix,
    }
}

/// CAP_SYS_RESOURCE's bit in the capability masks.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Bit `bit` of a `/proc/<pid>/status` capability line such as `CapEff:\t000001ffffffffff`.
pub fn cap_bit(status: &str, field: &str, bit: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let mask = u64::from_str_radix(hex.trim(), 16).ok()?;
    Some(mask >> bit & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB8: Limit = Limit::Bytes(8 << 20);

    fn policy(req: &str, on_failure: &str) -> MemlockPolicy {
        MemlockPolicy::from_config(&MemlockConfig {
            rdma_default: req.into(),
            on_failure: on_failure.into(),
        })
        .unwrap()
    }

    #[test]
    fn this_machine_unlimited_without_cap_fails_create() {
        let v = memlock_verdict(policy("unlimited", "error"), MIB8, false);
        assert_eq!(v.outcome, Outcome::CreateFails);
        assert_eq!(v.pods_get, None);
        assert!(
            v.message.contains("unlimited requested; hard limit 8 MiB"),
            "{}",
            v.message
        );
        assert!(v.message.contains("CAP_SYS_RESOURCE"), "{}", v.message);
        assert!(
            v.message.contains("hard limit in force is 8388608"),
            "{}",
            v.message
        );
        assert!(v.fix.unwrap().contains("LimitMEMLOCK=infinity"));
    }

    #[test]
    fn clamp_gives_the_hard_limit() {
        let v = memlock_verdict(policy("unlimited", "clamp-with-warning"), MIB8, false);
        assert_eq!((v.outcome, v.pods_get), (Outcome::Clamped, Some(MIB8)));
    }

    #[test]
    fn capability_raises_and_small_requests_fit() {
        let v = memlock_verdict(policy("unlimited", "error"), MIB8, true);
        assert_eq!(
            (v.outcome, v.pods_get),
            (Outcome::Raised, Some(Limit::Unlimited))
        );
        let v = memlock_verdict(policy("4194304", "error"), MIB8, false);
        assert_eq!(
            (v.outcome, v.pods_get),
            (Outcome::Fits, Some(Limit::Bytes(4 << 20)))
        );
        let v = memlock_verdict(policy("8388608", "error"), MIB8, false);
        assert_eq!(
            v.outcome,
            Outcome::Fits,
            "equal to the hard limit needs no privilege"
        );
        let v = memlock_verdict(policy("unlimited", "error"), Limit::Unlimited, false);
        assert_eq!(v.outcome, Outcome::Fits);
        assert!(v.fix.is_none());
    }

    #[test]
    fn bad_policy_values_are_refused() {
        let bad = |r: &str, f: &str| {
            MemlockPolicy::from_config(&MemlockConfig {
                rdma_default: r.into(),
                on_failure: f.into(),
            })
            .unwrap_err()
            .to_string()
        };
        assert!(bad("lots", "error").contains("rdma_default"));
        assert!(bad("-1", "error").contains("rdma_default"));
        assert!(bad("unlimited", "clamp").contains("on_failure"));
    }

    #[test]
    fn limits_order_and_print() {
        assert!(Limit::Bytes(u64::MAX - 1) < Limit::Unlimited);
        assert_eq!(Limit::from_raw(libc::RLIM_INFINITY), Limit::Unlimited);
        assert_eq!(MIB8.to_string(), "8 MiB");
        assert_eq!(Limit::Bytes(65536).to_string(), "64 KiB");
        assert_eq!(Limit::Bytes(1000).to_string(), "1000 bytes");
    }

    #[test]
    fn capability_bits_from_status() {
        let status = "Name:\tx\nCapEff:\t000001fffeffffff\nCapBnd:\t0000000001000000\n";
        assert_eq!(cap_bit(status, "CapEff", CAP_SYS_RESOURCE), Some(false));
        assert_eq!(cap_bit(status, "CapBnd", CAP_SYS_RESOURCE), Some(true));
        assert_eq!(cap_bit(status, "CapPrm", CAP_SYS_RESOURCE), None);
        assert_eq!(cap_bit("CapEff:\tzz\n", "CapEff", 24), None);
    }
}
