//! Honest doubles for tests and benches (feature `test-support`): a fake sysfs/dev/proc
//! tree with two mlx5 devices and NVIDIA nodes, and a fake `libnvidia-ml.so` built from C.

mod fake_host;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use fake_host::FakeHost;

/// The fake NVML's source, embedded so other crates can build it too.
pub const FAKE_NVML_C: &str = include_str!("../../tests/fake_nvml/fake_nvml.c");
/// UUIDs of the fake GPUs, by NVML index.
pub const FAKE_GPU_UUIDS: [&str; 2] = [
    "GPU-11111111-2222-3333-4444-555555555555",
    "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
];
/// Minors of the fake GPUs, by NVML index (deliberately not the index).
pub const FAKE_GPU_MINORS: [u32; 2] = [3, 7];
pub const FAKE_DRIVER_VERSION: &str = "550.54.15";
/// Dynamic major of nvidia-uvm in the fake `/proc/devices`.
pub const FAKE_UVM_MAJOR: i64 = 509;
/// uverbs majors/minors in the fake tree (231:192, 231:193), umad (231:0/1), issm (231:64/65).
pub const IB_MAJOR: i64 = 231;
pub const RDMA_CM_DEV: (i64, i64) = (10, 58);

/// Compiles the fake NVML into `out_dir/libnvidia-ml.so.1` with the system `cc`.
/// The library is built under a temporary name and renamed into place, so a process that
/// already mapped an older copy is not disturbed.
pub fn build_fake_nvml(out_dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(out_dir)?;
    let pid = std::process::id();
    let src = out_dir.join(format!(".fake_nvml.{pid}.c"));
    let tmp = out_dir.join(format!(".libnvidia-ml.so.1.{pid}.tmp"));
    std::fs::write(&src, FAKE_NVML_C)?;
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&src)
        .output();
    let _ = std::fs::remove_file(&src);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::other(format!(
            "cc failed building fake NVML: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let lib = out_dir.join("libnvidia-ml.so.1");
    std::fs::rename(&tmp, &lib)?;
    Ok(lib)
}
