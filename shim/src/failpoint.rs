//! A test hook, not a feature: `RUND_FAILPOINT=<point>[@<id>][,...]` makes
//! the shim SIGKILL itself when Create of container `<id>` (of any
//! container, without `@`) reaches `<point>`, or its Start begins
//! (`start`), as an OOM kill or a node fault would. The fault tests use it to crash the shim at each phase
//! without relying on timing. `panic:<point>[@<id>]` panics there instead,
//! as a bug would. The variable is read once; unset, a point costs one load
//! and a length check.
//!
//! Points: `create:reserved`, `create:sandbox` (agent running, not yet
//! recorded in the bundle), `create:rootfs`, `create:lowers` (idmapped
//! lower layers staged in the bundle), `create:cgroup`, `create:agent`
//! (the agent holds the process), `create:placed` (before the answer).

use std::sync::OnceLock;

pub const ENV: &str = "RUND_FAILPOINT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Kill,
    Panic,
}

struct Point {
    action: Action,
    name: String,
    id: Option<String>,
}

static POINTS: OnceLock<Vec<Point>> = OnceLock::new();

fn parse(text: &str) -> Vec<Point> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (action, p) = match p.strip_prefix("panic:") {
                Some(rest) => (Action::Panic, rest),
                None => (Action::Kill, p),
            };
            let (name, id) = match p.split_once('@') {
                Some((name, id)) => (name, Some(id.to_string())),
                None => (p, None),
            };
            Point {
                action,
                name: name.to_string(),
                id,
            }
        })
        .collect()
}

fn armed(points: &[Point], point: &str, id: &str) -> Option<Action> {
    points
        .iter()
        .find(|p| p.name == point && p.id.as_deref().is_none_or(|w| w == id))
        .map(|p| p.action)
}

/// Kills the shim here, or panics, if `point` is armed for container `id`.
pub fn hit(point: &str, id: &str) {
    let points = POINTS.get_or_init(|| parse(&std::env::var(ENV).unwrap_or_default()));
    if points.is_empty() {
        return;
    }
    match armed(points, point, id) {
        None => {}
        Some(Action::Kill) => {
            tracing::warn!(id, "failpoint {point}: killing the shim");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        Some(Action::Panic) => panic!("failpoint {point}: a panic in Create of {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_match_by_name_and_optional_id() {
        let p = parse("create:rootfs@a, create:cgroup,,panic:create:agent@b");
        assert_eq!(armed(&p, "create:rootfs", "a"), Some(Action::Kill));
        assert_eq!(armed(&p, "create:rootfs", "b"), None);
        assert_eq!(armed(&p, "create:cgroup", "anything"), Some(Action::Kill));
        assert_eq!(armed(&p, "create:agent", "a"), None);
        assert_eq!(armed(&p, "create:agent", "b"), Some(Action::Panic));
        assert!(parse("").is_empty());
    }
}
