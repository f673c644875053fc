//! Device cgroup rules. v1: deny everything, then allow rule by rule.
//! v2 needs a BPF program, which rund does not build yet.

use crate::ctl::write;
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType,
};
use std::path::Path;

/// Devices every container may use, appended after the spec's rules as runc
/// does: mknod of any node, null, zero, full, random, urandom, tty, console,
/// ptmx and the pts slaves.
pub const DEFAULT_ALLOWED_DEVICES: &[&str] = &[
    "c *:* m",
    "b *:* m",
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:1 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
];

/// The kernel's `type major:minor access` form of one rule.
pub(crate) fn rule_string(r: &LinuxDeviceCgroup) -> String {
    let t = r.typ().unwrap_or(LinuxDeviceType::A).as_str().to_string();
    let num = |v: Option<i64>| {
        v.filter(|v| *v >= 0)
            .map_or("*".to_string(), |v| v.to_string())
    };
    let access = r
        .access()
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or("rwm");
    if t == "a" {
        // The kernel accepts "a" alone for everything.
        return "a".into();
    }
    format!("{t} {}:{} {access}", num(r.major()), num(r.minor()))
}

/// Deny all, then the spec's rules in order, then [`DEFAULT_ALLOWED_DEVICES`].
pub(crate) fn apply_v1(fs: &dyn CgroupFs, dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<()> {
    write(fs, dir, "devices.deny", "a")?;
    for r in rules {
        let file = if r.allow() {
            "devices.allow"
        } else {
            "devices.deny"
        };
        let s = rule_string(r);
        // A leading deny-all is the usual first rule: already done.
        if !r.allow() && s == "a" {
            continue;
        }
        write(fs, dir, file, &s)?;
    }
    for d in DEFAULT_ALLOWED_DEVICES {
        write(fs, dir, "devices.allow", d)?;
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
    let rest = match rules.first() {
        Some(r) if !r.allow() && rule_string(r) == "a" => &rules[1..],
        _ => rules,
    };
    if rest.iter().any(|r| !r.allow()) || !holds_baseline(fs, dir) {
        return apply_v1(fs, dir, rules);
    }
    for r in rest {
        let s = rule_string(r);
        if !DEFAULT_ALLOWED_DEVICES.contains(&s.as_str()) {
            write(fs, dir, "devices.allow", &s)?;
        }
    }
    Ok(())
}

/// Whether the rule list leaves every device allowed (nothing to enforce):
/// no rules, or a wildcard allow with no deny after it.
pub fn is_allow_all(rules: Option<&[LinuxDeviceCgroup]>) -> bool {
    let Some(rules) = rules else { return true };
    let mut allowed_all = rules.is_empty();
    for r in rules {
        let wildcard = rule_string(r) == "a"
            || (r.major().is_none()
                && r.minor().is_none()
                && r.access().as_deref().unwrap_or("rwm") == "rwm"
                && matches!(r.typ(), None | Some(LinuxDeviceType::A)));
        if r.allow() && wildcard {
            allowed_all = true;
        } else if !r.allow() {
            allowed_all = false;
        }
    }
    allowed_all
}

/// Allow rules for the spec's `linux.devices` nodes: the shim appends them to
/// `resources.devices` so the created nodes can be opened.
pub fn allow_rules_for_devices(devs: &[LinuxDevice]) -> Vec<LinuxDeviceCgroup> {
    devs.iter()
        .filter_map(|d| {
            LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(d.typ())
                .major(d.major())
                .minor(d.minor())
                .access("rwm")
                .build()
                .ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        allow: bool,
        t: Option<LinuxDeviceType>,
        maj: Option<i64>,
        access: &str,
    ) -> LinuxDeviceCgroup {
        let mut b = LinuxDeviceCgroupBuilder::default()
            .allow(allow)
            .access(access);
        if let Some(t) = t {
            b = b.typ(t);
        }
        if let Some(m) = maj {
            b = b.major(m);
        }
        b.build().unwrap()
    }

    #[test]
    fn strings_and_allow_all() {
        let deny_all = rule(false, None, None, "rwm");
        let null = rule(true, Some(LinuxDeviceType::C), Some(1), "rw");
        assert_eq!(rule_string(&deny_all), "a");
        assert_eq!(rule_string(&null), "c 1:* rw");
        assert!(is_allow_all(None));
        assert!(is_allow_all(Some(&[])));
        assert!(!is_allow_all(Some(std::slice::from_ref(&deny_all))));
        assert!(!is_allow_all(Some(&[deny_all.clone(), null])));
        let allow_all = rule(true, Some(LinuxDeviceType::A), None, "rwm");
        assert!(is_allow_all(Some(&[deny_all, allow_all])));
    }
}
