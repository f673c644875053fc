//! The skip policy of every rund test.
//!
//! A test that cannot run here (not root, the wrong cgroup mode, no user namespaces, an RDMA
//! device present or missing, a rund-only test run against runc) calls [`skip!`] or [`skip`].
//! - Normally that prints `SKIP <binary>::<test>: <reason>` on stderr (not captured by libtest,
//!   so it shows in `cargo test` output) and the test returns.
//! - With `RUND_REQUIRE_ALL=1` (`make test`, `.ci/run`, the VM suites) it panics instead, unless
//!   the test is allow-listed for the suite being run: `tests/skips/<suite>.txt`, the suite named
//!   by `RUND_SUITE` (`host` by default, `v2` in the pure-cgroup-v2 VM). When the rund suites run
//!   against runc (`RUND_IT_RUNTIME` set to another runtime), `tests/skips/runc.txt` applies too.
//!
//! A test is named `<binary>::<test>`: the test binary's crate-level name (cargo's hash
//! stripped) and the libtest name, taken from the test's thread.

mod key;
mod list;

use std::io::Write as _;

pub use key::{current_test_key, exe_name};
pub use list::{parse, Entry, ListError};

/// `1` turns every skip that is not allow-listed into a failure.
pub const REQUIRE_ENV: &str = "RUND_REQUIRE_ALL";
/// Which suite's allow-list applies (`host` or `v2`); default `host`.
pub const SUITE_ENV: &str = "RUND_SUITE";
/// The runtime the rund suites drive; anything but rund's adds the runc list.
pub const RUNTIME_ENV: &str = "RUND_IT_RUNTIME";
/// rund's runtime name.
pub const RUND_RUNTIME: &str = "io.containerd.rund.v2";
/// The suite when `RUND_SUITE` is unset.
pub const DEFAULT_SUITE: &str = "host";

/// A checked-in allow-list.
#[derive(Debug, Clone, Copy)]
pub struct List {
    pub name: &'static str,
    /// Relative to the workspace.
    pub path: &'static str,
    pub text: &'static str,
}

/// The allow-lists of the suites.
pub const SUITES: &[List] = &[
    List {
        name: "host",
        path: "tests/skips/host.txt",
        text: include_str!("../../skips/host.txt"),
    },
    List {
        name: "v2",
        path: "tests/skips/v2.txt",
        text: include_str!("../../skips/v2.txt"),
    },
    #[cfg(test)]
    List {
        name: "selftest",
        path: "tests/skip/src/selftest.txt",
        text: include_str!("selftest.txt"),
    },
];
/// The allow-list for rund-only tests when the rund suites run against runc.
pub const RUNC_LIST: List = List {
    name: "runc",
    path: "tests/skips/runc.txt",
    text: include_str!("../../skips/runc.txt"),
};

/// Skips the running test: see the crate docs. Returns `Default::default()` from the enclosing
/// function (`()` or `None`), so it ends a `#[test]` or an `Option`-returning set-up helper.
#[macro_export]
macro_rules! skip {
    ($($arg:tt)+) => {{
        $crate::skip(&::std::format!($($arg)+));
        return ::std::default::Default::default();
    }};
}

/// Reports a skip of the running test and returns (the caller stops the test or the skipped
/// part); panics under `RUND_REQUIRE_ALL=1` unless the test is allow-listed.
pub fn skip(reason: &str) {
    let key = current_test_key();
    match Policy::from_env().decide(&key) {
        Decision::Skip => say(&format!("SKIP {key}: {reason}")),
        Decision::Allowed { list, why } => {
            say(&format!("SKIP {key}: {reason} (allowed by {list}: {why})"))
        }
        Decision::Forbidden { list } => panic!(
            "{key} cannot run here: {reason}. {REQUIRE_ENV}=1 forbids skipping it: fix the \
             environment, or add `{key} <why>` to {list}"
        ),
    }
}

/// Straight to fd 2: libtest captures `eprintln!`, and a skip must be seen.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// What a skip turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Skips are allowed (`RUND_REQUIRE_ALL` unset).
    Skip,
    /// Allow-listed in the list at path `list` for `why`.
    Allowed { list: &'static str, why: String },
    /// Not allow-listed while everything must run; `list` is the suite's list.
    Forbidden { list: &'static str },
}

/// The allow-lists in force and whether skips are failures.
#[derive(Debug, Clone)]
pub struct Policy {
    pub require_all: bool,
    /// The suite's list first, then the runc list when it applies.
    pub lists: Vec<(List, Vec<Entry>)>,
}

impl Policy {
    /// The policy for `suite`, plus the runc list when `runtime` is not rund's.
    /// Panics on an unknown suite or a malformed list (both are bugs of the checkout).
    pub fn new(require_all: bool, suite: &str, runtime: Option<&str>) -> Policy {
        let Some(list) = SUITES.iter().find(|l| l.name == suite) else {
            let known: Vec<&str> = SUITES.iter().map(|l| l.name).collect();
            panic!("{SUITE_ENV}={suite:?}: unknown suite (known: {known:?})");
        };
        let mut lists = vec![(*list, list.entries())];
        if runtime.is_some_and(|r| r != RUND_RUNTIME) {
            lists.push((RUNC_LIST, RUNC_LIST.entries()));
        }
        Policy { require_all, lists }
    }

    /// From `RUND_REQUIRE_ALL`, `RUND_SUITE` and `RUND_IT_RUNTIME`.
    pub fn from_env() -> Policy {
        let require_all = std::env::var(REQUIRE_ENV).as_deref() == Ok("1");
        let suite = std::env::var(SUITE_ENV).unwrap_or_else(|_| DEFAULT_SUITE.to_owned());
        let runtime = std::env::var(RUNTIME_ENV).ok();
        Policy::new(require_all, &suite, runtime.as_deref())
    }

    pub fn decide(&self, key: &str) -> Decision {
        if !self.require_all {
            return Decision::Skip;
        }
        for (list, entries) in &self.lists {
            if let Some(e) = entries.iter().find(|e| e.key == key) {
                return Decision::Allowed {
                    list: list.path,
                    why: e.reason.clone(),
                };
            }
        }
        Decision::Forbidden {
            list: self.lists[0].0.path,
        }
    }
}

impl List {
    /// The parsed entries; panics on a malformed list (a bug of the checkout, caught by the
    /// crate's own tests).
    pub fn entries(&self) -> Vec<Entry> {
        parse(self.text).unwrap_or_else(|e| panic!("{}: {e}", self.path))
    }
}

#[cfg(test)]
mod tests;
