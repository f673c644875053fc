//! A container: its filesystem view and the processes forked into it.

pub mod child;
pub mod devices;
pub mod fds;
pub mod hooks;
pub mod masks;
pub mod mounter;
pub mod mounts;
pub mod ns;
pub mod options;
pub mod paths;
pub mod propagation;
pub mod rootfs;
pub mod stdio;
pub mod sync;
pub mod sysctl;
