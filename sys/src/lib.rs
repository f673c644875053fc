//! rund's raw syscalls (the ones nix does not wrap) and `/proc` parsing,
//! each written once for the shim, the agent and the benches. Thin: no
//! policy and no error context; callers name what they were doing. The
//! testing seams (the agent's `Syscall`, the cgroup crate's `CgroupFs`) sit
//! on top of this crate.

pub mod creds;
pub mod helper;
pub mod mount;
pub mod ns;
pub mod process;
pub mod procfs;
pub mod rlimit;
pub mod spawn;
pub mod trim;
