//! v2: the rule list becomes a BPF device filter on the cgroup directory.

use super::{emulate, program};
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxDeviceCgroup;
use std::path::Path;

/// Compile the spec's rules (defaults appended) and make the program the
/// cgroup's filter, replacing the previous one atomically.
pub(crate) fn apply_v2(fs: &dyn CgroupFs, dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<()> {
    let emu = emulate(rules)?;
    fs.set_device_filter(dir, &program(&emu))
}

/// Detach the filter (before the directory is removed or reused).
pub(crate) fn clear_v2(fs: &dyn CgroupFs, dir: &Path) -> Result<()> {
    fs.clear_device_filter(dir)
}
