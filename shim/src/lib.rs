//! rund's shim: containerd-shim-rund-v2 and the `rund` admin CLI.

pub mod cgroups;
pub mod cli;
pub mod clock;
pub mod config;
pub mod entry;
pub mod error;
pub mod failpoint;
pub mod hooks;
pub mod io;
pub mod logging;
pub mod phase_layer;
pub mod policy;
pub mod protowire;
pub mod record;
pub mod rlimit;
pub mod rootfs;
pub mod sandbox;
pub mod sandboxer;
pub mod spec;
pub mod task;
pub mod userns;
