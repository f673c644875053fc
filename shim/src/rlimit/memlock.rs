//! RLIMIT_MEMLOCK for RDMA: pinned memory counts against it, and pods
//! inherit containerd's small default, so RDMA containers get a default of
//! their own (DESIGN.md, "memlock").

use oci_spec::runtime::{PosixRlimit, PosixRlimitBuilder, PosixRlimitType};

use super::RlimitError;

/// Parses "unlimited" or a byte count.
pub fn parse_limit(what: &str, v: &str) -> Result<u64, RlimitError> {
    if v == "unlimited" || v == "infinity" {
        return Ok(libc::RLIM_INFINITY);
    }
    v.parse::<u64>().map_err(|_| {
        RlimitError::BadValue(format!(
            "{what}: {v:?} is not \"unlimited\" or a number of bytes"
        ))
    })
}

/// The spec's rlimits plus the memlock default: an explicit RLIMIT_MEMLOCK
/// always wins; else `rund.io/memlock`; else, for RDMA containers, the
/// configured default.
pub fn with_default(
    limits: &[PosixRlimit],
    annotation: Option<&str>,
    wants_rdma: bool,
    rdma_default: &str,
) -> Result<Vec<PosixRlimit>, RlimitError> {
    let mut out = limits.to_vec();
    if limits
        .iter()
        .any(|l| l.typ() == PosixRlimitType::RlimitMemlock)
    {
        return Ok(out);
    }
    let value = match (annotation, wants_rdma) {
        (Some(v), _) => parse_limit(rund_annotations::MEMLOCK, v)?,
        (None, true) => parse_limit("[memlock] rdma_default", rdma_default)?,
        (None, false) => return Ok(out),
    };
    let rl = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitMemlock)
        .soft(value)
        .hard(value)
        .build()
        .map_err(|e| RlimitError::BadValue(e.to_string()))?;
    out.push(rl);
    Ok(out)
}

/// What to do when a limit cannot be raised (`[memlock] on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    Error,
    ClampWithWarning,
}

impl OnFailure {
    pub fn parse(v: &str) -> Result<OnFailure, RlimitError> {
        match v {
            "error" => Ok(OnFailure::Error),
            "clamp-with-warning" => Ok(OnFailure::ClampWithWarning),
            other => Err(RlimitError::BadValue(format!(
                "[memlock] on_failure: {other:?} is not \"error\" or \"clamp-with-warning\""
            ))),
        }
    }
}

/// Applies `limits` to `pid`; with `ClampWithWarning`, a memlock raise that
/// is refused is clamped to the hard limit in force and reported.
pub fn apply(
    pid: i32,
    limits: &[PosixRlimit],
    on_failure: OnFailure,
) -> Result<Vec<String>, RlimitError> {
    super::validate(limits)?;
    let mut warnings = Vec::new();
    for l in limits {
        let kind = l.typ().to_string();
        match super::set(pid, &kind, l.soft(), l.hard()) {
            Ok(()) => {}
            Err(e @ RlimitError::CannotRaise { .. })
                if on_failure == OnFailure::ClampWithWarning && kind == "RLIMIT_MEMLOCK" =>
            {
                let (_, hard) = super::get(pid, &kind)?;
                super::set(pid, &kind, l.soft().min(hard), hard)?;
                warnings.push(format!("memlock clamped to {hard} bytes: {e}"));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memlock(v: u64) -> PosixRlimit {
        PosixRlimitBuilder::default()
            .typ(PosixRlimitType::RlimitMemlock)
            .soft(v)
            .hard(v)
            .build()
            .unwrap()
    }

    #[test]
    fn explicit_limit_wins_then_annotation_then_rdma_default() {
        let explicit = with_default(&[memlock(42)], Some("unlimited"), true, "unlimited").unwrap();
        assert_eq!(explicit.len(), 1);
        assert_eq!(explicit[0].hard(), 42);
        let ann = with_default(&[], Some("1048576"), false, "unlimited").unwrap();
        assert_eq!(ann[0].hard(), 1 << 20);
        let rdma = with_default(&[], None, true, "unlimited").unwrap();
        assert_eq!(rdma[0].hard(), libc::RLIM_INFINITY);
        assert!(with_default(&[], None, false, "unlimited")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let e = with_default(&[], Some("lots"), false, "unlimited").unwrap_err();
        assert!(e.to_string().contains(rund_annotations::MEMLOCK), "{e}");
        assert!(OnFailure::parse("ignore").is_err());
    }

    #[test]
    fn clamping_is_reported_not_silent() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let (_, hard) = super::super::get(pid, "RLIMIT_MEMLOCK").unwrap();
        let want = [memlock(libc::RLIM_INFINITY)];
        match apply(pid, &want, OnFailure::Error) {
            Ok(_) => eprintln!("note: CAP_SYS_RESOURCE present; raise succeeded"),
            Err(e) => {
                assert!(e.to_string().contains("CAP_SYS_RESOURCE"), "{e}");
                let warnings = apply(pid, &want, OnFailure::ClampWithWarning).unwrap();
                assert_eq!(warnings.len(), 1, "{warnings:?}");
                assert_eq!(super::super::get(pid, "RLIMIT_MEMLOCK").unwrap().1, hard);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
