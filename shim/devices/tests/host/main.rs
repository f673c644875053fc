//! Discovery, selection, injection and CDI against the fake host tree and the fake NVML.
//! No GPU or RDMA hardware is involved: these are the honest doubles of the issue.

mod cdi;
mod cli;
mod gpu;
mod inject;
mod rdma;

use std::path::PathBuf;
use std::sync::OnceLock;

use rund_devices::testutil::{build_fake_nvml, FakeHost};
use tempfile::TempDir;

/// A fresh fake host per test (tests run in parallel).
pub fn host() -> (TempDir, FakeHost) {
    let dir = tempfile::tempdir().unwrap();
    let h = FakeHost::build(dir.path()).unwrap();
    if let Some(e) = &h.mknod_error {
        println!("note: char nodes not created ({e}); sysfs dev files still used");
    }
    (dir, h)
}

/// The fake NVML, built once per test binary into cargo's target tmp dir (nothing is
/// left in /tmp). None, with a printed reason, if `cc` fails.
pub fn fake_nvml() -> Option<PathBuf> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        match build_fake_nvml(&dir) {
            Ok(p) => Some(p),
            Err(e) => {
                println!("skip: cannot build fake NVML: {e}");
                None
            }
        }
    })
    .clone()
}
