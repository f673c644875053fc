//! Process attributes: everything applied in the workload right before execve.

pub mod caps;
pub mod exec;
pub mod rlimit;
pub mod seccomp;
#[cfg(target_env = "musl")]
mod seccomp_musl;
pub mod user;
