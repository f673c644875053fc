//! v1: deny everything, then allow or deny rule by rule; the kernel keeps
//! the same exception list the emulator models.

use super::{full_list, Kind, Rule, DEFAULT_ALLOWED_DEVICES};
use crate::ctl::write;
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxDeviceCgroup;
use std::path::Path;

fn write_rule(fs: &dyn CgroupFs, dir: &Path, r: &Rule) -> Result<()> {
    let file = if r.allow {
        "devices.allow"
    } else {
        "devices.deny"
    };
    write(fs, dir, file, &r.v1_string())
}

/// Deny all, then the spec's rules in order, then [`DEFAULT_ALLOWED_DEVICES`].
pub(crate) fn apply_v1(fs: &dyn CgroupFs, dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<()> {
    let list = full_list(rules)?;
    write(fs, dir, "devices.deny", "a")?;
    for (i, r) in list.iter().enumerate() {
        // A leading deny-all is the usual first rule: already done.
        if i == 0 && !r.allow && r.kind == Kind::All {
            continue;
        }
        write_rule(fs, dir, r)?;
    }
    Ok(())
}

/// The baseline every pool slot holds: deny all, then the defaults.
pub(crate) fn apply_v1_baseline(fs: &dyn CgroupFs, dir: &Path) -> Result<()> {
    apply_v1(fs, dir, &[])
}

/// Whether `devices.list` shows exactly the baseline.
fn holds_baseline(fs: &dyn CgroupFs, dir: &Path) -> bool {
    let Ok(list) = crate::ctl::read(fs, dir, "devices.list") else {
        return false;
    };
    let mut have: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut want = DEFAULT_ALLOWED_DEVICES.to_vec();
    have.sort_unstable();
    want.sort_unstable();
    have == want
}

/// `apply_v1` on a pool slot, which should hold the baseline (checked with
/// one read: a slot made by an older rund holds allow-all). When the rules
/// (after a leading deny-all) only allow, the result is the baseline plus
/// those allows: write just the ones it lacks. Any other deny needs the
/// full order.
pub(crate) fn apply_v1_on_baseline(
    fs: &dyn CgroupFs,
    dir: &Path,
    rules: &[LinuxDeviceCgroup],
) -> Result<()> {
    let list = full_list(rules)?;
    let spec = &list[..rules.len()];
    let rest = match spec.first() {
        Some(r) if !r.allow && r.kind == Kind::All => &spec[1..],
        _ => spec,
    };
    if rest.iter().any(|r| !r.allow || r.kind == Kind::All) || !holds_baseline(fs, dir) {
        return apply_v1(fs, dir, rules);
    }
    for r in rest {
        if !DEFAULT_ALLOWED_DEVICES.contains(&r.v1_string().as_str()) {
            write_rule(fs, dir, r)?;
        }
    }
    Ok(())
}
