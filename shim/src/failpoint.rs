//! A test hook, not a feature: `RUND_FAILPOINT=<point>[@<id>][,...]` makes
//! the shim SIGKILL itself when Create of container `<id>` (of any
//! container, without `@`) reaches `<point>`, or its Start begins
//! (`start`), as an OOM kill or a node fault would. The fault tests use it to crash the shim at each phase
//! without relying on timing. The variable is read once; unset, a point
//! costs one load and a length check.
//!
//! Points: `create:reserved`, `create:sandbox` (agent running, not yet
//! recorded in the bundle), `create:rootfs`, `create:lowers` (idmapped
//! lower layers staged in the bundle), `create:cgroup`, `create:agent`
//! (the agent holds the process), `create:placed` (before the answer).

use std::sync::OnceLock;

pub const ENV: &str = "RUND_FAILPOINT";

static POINTS: OnceLock<Vec<(String, Option<String>)>> = OnceLock::new();

fn parse(text: &str) -> Vec<(String, Option<String>)> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('@') {
            Some((point, id)) => (point.to_string(), Some(id.to_string())),
            None => (p.to_string(), None),
        })
        .collect()
}

fn armed(points: &[(String, Option<String>)], point: &str, id: &str) -> bool {
    points
        .iter()
        .any(|(p, want)| p == point && want.as_deref().is_none_or(|w| w == id))
}

/// Kills the shim here if `point` is armed for container `id`.
pub fn hit(point: &str, id: &str) {
    let points = POINTS.get_or_init(|| parse(&std::env::var(ENV).unwrap_or_default()));
    if points.is_empty() || !armed(points, point, id) {
        return;
    }
    tracing::warn!(id, "failpoint {point}: killing the shim");
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_match_by_name_and_optional_id() {
        let p = parse("create:rootfs@a, create:cgroup,,");
        assert!(armed(&p, "create:rootfs", "a"));
        assert!(!armed(&p, "create:rootfs", "b"));
        assert!(armed(&p, "create:cgroup", "anything"));
        assert!(!armed(&p, "create:agent", "a"));
        assert!(parse("").is_empty());
    }
}
