//! Discovery, selection, injection and CDI against the fake host tree and the fake NVML.
//! No GPU or RDMA hardware is involved: fakes stand in for both.

mod cdi;
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
/// left in /tmp). None, after [`rund_skip::skip`] in every test that asks, if `cc` fails.
pub fn fake_nvml() -> Option<PathBuf> {
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        build_fake_nvml(&dir).map_err(|e| e.to_string())
    });
    match lib {
        Ok(p) => Some(p.clone()),
        Err(e) => rund_skip::skip!("cannot build fake NVML: {e}"),
    }
}
