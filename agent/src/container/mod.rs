//! A container: its filesystem view and the processes forked into it.

pub mod child;
pub mod devices;
pub mod fds;
pub mod hooks;
pub mod mounts;
pub mod ns;
pub mod options;
pub mod paths;
pub mod rootfs;
pub mod stdio;
pub mod sync;
