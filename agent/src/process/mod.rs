//! Process attributes: everything applied in the workload right before execve.

pub mod caps;
pub mod exec;
pub mod rlimit;
pub mod seccomp;
pub mod user;
