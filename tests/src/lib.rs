//! rund-tests: the harness for rund's integration tests and benchmarks.
//!
//! - [`Containerd`]: a private containerd, 1.6 or 2.1 (own root, state, sockets, config, PATH) per test;
//!   `ctr` helpers live on it.
//! - [`busybox_rootfs`] / [`shared_busybox_rootfs`]: a busybox root filesystem, offline.
//! - [`oci_image_tarball`]: an OCI image of that rootfs, importable and usable as pause image.
//! - [`LeakSnapshot`]: mounts, cgroups, processes, sockets and bundles attributable to one
//!   containerd instance, with a readable diff.

pub mod bins;
pub mod cmd;
pub mod containerd;
pub mod cri;
pub mod error;
pub mod faults;
pub mod fsview;
pub mod grpc;
pub mod hung;
pub mod image;
pub mod inside;
pub mod leaks;
pub mod ocispec;
pub mod pernode;
pub mod rootfs;
pub mod shim;

pub use bins::{rund_bins_or_skip, RundBins};
pub use cmd::CmdOutput;
pub use containerd::{
    runtime_under_test, Containerd, ContainerdOpts, RunSpec, TaskInfo, K8S_NAMESPACE, RUNC_RUNTIME,
    RUND_RUNTIME,
};
pub use cri::{ContainerSpec, CriClient, CriError, PodSpec};
pub use error::{Error, Result};
pub use image::{oci_image_tarball, oci_image_tarball_with_cmd, BUSYBOX_IMAGE};
pub use leaks::{assert_no_leaks, assert_no_leaks_within, LeakSnapshot};
pub use rootfs::{busybox_rootfs, shared_busybox_rootfs};
/// The skip policy: `skip!(reason)` prints, or fails under `RUND_REQUIRE_ALL=1` unless the test
/// is allow-listed in `tests/skips/` (see the `rund-skip` crate).
pub use rund_skip::skip;
pub mod userns;
pub mod victim;
