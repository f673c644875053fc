//! The bodies of rund's fuzz targets, one module per target, so clippy sees
//! them as library code and each `fuzz_targets/*.rs` is one line. Each body
//! asserts what the parser promises, not only that it returns.

pub mod annotations;
pub mod cdi_spec;
pub mod cgroup_path;
pub mod devices;
pub mod fdpass;
pub mod grammar;
pub mod launch;
pub mod lease_file;
pub mod scenario;
pub mod spec_config;

/// The agent's child reports (`ChildMsg`), compiled from the agent's own
/// source: the agent is a binary, not a library.
#[allow(dead_code)]
#[path = "../../agent/src/container/sync.rs"]
pub mod agent_sync;
