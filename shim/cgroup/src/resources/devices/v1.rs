//! v1: deny everything, then allow or deny rule by rule; the kernel keeps
//! the same exception list the emulator models.

use super::{full_list, Kind, Rule, DEFAULT_ALLOWED_DEVICES};
use crate::ctl::{write, write_each};
use crate::error::Result;
use crate::fs::CgroupFs;
use oci_spec::runtime::LinuxDeviceCgroup;
use std::collections::HashSet;
use std::path::Path;

/// The rules as runs for one file each (allow or deny), in order; each run
/// is written through one open file. A rule already in its run since the
/// last type-`a` rule is dropped: between the two only rules of the same
/// action ran, which add (or, in allow-all mode, remove) exceptions and
/// never undo the first, so the kernel's list would not change.
fn runs(list: &[Rule]) -> Vec<(bool, Vec<Rule>)> {
    let mut out: Vec<(bool, Vec<Rule>)> = Vec::new();
    let mut seen = HashSet::new();
    for r in list {
        if out.last().map(|(allow, _)| *allow) != Some(r.allow) {
            out.push((r.allow, Vec::new()));
            seen.clear();
        }
        if r.kind == Kind::All {
            seen.clear();
        } else if !seen.insert(r.v1_string()) {
            continue;
        }
        if let Some((_, run)) = out.last_mut() {
            run.push(*r);
        }
    }
    out
}

fn write_runs(fs: &dyn CgroupFs, dir: &Path, list: &[Rule]) -> Result<()> {
    for (allow, run) in runs(list) {
        let file = if allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        let values: Vec<String> = run.iter().map(Rule::v1_string).collect();
        write_each(fs, dir, file, &values)?;
    }
    Ok(())
}

/// Deny all, then the spec's rules in order, then [`DEFAULT_ALLOWED_DEVICES`].
pub(crate) fn apply_v1(fs: &dyn CgroupFs, dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<()> {
    let list = full_list(rules)?;
    // A leading deny-all is the usual first rule: the reset does it.
    let rest = match list.first() {
        Some(r) if !r.allow && r.kind == Kind::All => &list[1..],
        _ => &list[..],
    };
    write(fs, dir, "devices.deny", "a")?;
    write_runs(fs, dir, rest)
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
    let missing: Vec<Rule> = rest
        .iter()
        .filter(|r| !DEFAULT_ALLOWED_DEVICES.contains(&r.v1_string().as_str()))
        .copied()
        .collect();
    write_runs(fs, dir, &missing)
}

#[cfg(test)]
mod tests {
    use super::super::Emulator;
    use super::*;
    use crate::bpf::Insn;
    use std::io;
    use std::sync::Mutex;

    /// Records each open of a control file with the values written through
    /// it; `devices.list` reads as `list`.
    #[derive(Debug, Default)]
    struct Opens {
        opens: Mutex<Vec<(String, Vec<String>)>>,
        list: String,
    }

    impl Opens {
        fn take(&self) -> Vec<(String, Vec<String>)> {
            std::mem::take(&mut *self.opens.lock().unwrap())
        }
    }

    fn name(p: &Path) -> String {
        p.file_name().unwrap().to_string_lossy().into_owned()
    }

    impl CgroupFs for Opens {
        fn write(&self, path: &Path, data: &str) -> io::Result<()> {
            self.write_each(path, &[data.to_string()])
                .map_err(|(_, e)| e)
        }
        fn write_each(
            &self,
            path: &Path,
            values: &[String],
        ) -> std::result::Result<(), (usize, io::Error)> {
            self.opens
                .lock()
                .unwrap()
                .push((name(path), values.to_vec()));
            Ok(())
        }
        fn read(&self, path: &Path) -> io::Result<String> {
            assert_eq!(name(path), "devices.list");
            Ok(self.list.clone())
        }
        fn mkdir(&self, _: &Path) -> io::Result<()> {
            unreachable!("device rules make no directory")
        }
        fn rmdir(&self, _: &Path) -> io::Result<()> {
            unreachable!("device rules remove no directory")
        }
        fn rename(&self, _: &Path, _: &Path) -> io::Result<()> {
            unreachable!("device rules rename nothing")
        }
        fn subdirs(&self, _: &Path) -> io::Result<Vec<String>> {
            unreachable!("device rules list no directory")
        }
        fn set_device_filter(&self, _: &Path, _: &[Insn]) -> crate::Result<()> {
            unreachable!("v1 has no device filter")
        }
        fn clear_device_filter(&self, _: &Path) -> crate::Result<()> {
            unreachable!("v1 has no device filter")
        }
    }

    fn oci(json: &str) -> Vec<LinuxDeviceCgroup> {
        serde_json::from_str(json).unwrap()
    }

    /// containerd's default rules: deny all, then most of the defaults again.
    const CONTAINERD: &str = r#"[{"allow": false, "access": "rwm"},
        {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
        {"allow": true, "type": "c", "major": 1, "minor": 8, "access": "rwm"},
        {"allow": true, "type": "c", "major": 5, "minor": 0, "access": "rwm"},
        {"allow": true, "type": "c", "major": 136, "access": "rwm"},
        {"allow": true, "type": "c", "major": 10, "minor": 200, "access": "rwm"}]"#;

    #[test]
    fn a_fresh_cgroup_takes_one_open_per_file_and_each_rule_once() {
        let fs = Opens::default();
        apply_v1(&fs, Path::new("/cg"), &oci(CONTAINERD)).unwrap();
        let opens = fs.take();
        assert_eq!(opens.len(), 2, "{opens:?}");
        assert_eq!(opens[0], ("devices.deny".into(), vec!["a".to_string()]));
        let (file, allows) = &opens[1];
        assert_eq!(file, "devices.allow");
        let mut want: Vec<String> = [
            "c 1:3 rwm",
            "c 1:8 rwm",
            "c 5:0 rwm",
            "c 136:* rwm",
            "c 10:200 rwm",
        ]
        .map(String::from)
        .into();
        let rest: Vec<String> = DEFAULT_ALLOWED_DEVICES
            .iter()
            .map(|s| s.to_string())
            .filter(|s| !want.contains(s))
            .collect();
        want.extend(rest);
        assert_eq!(
            allows, &want,
            "the spec's order, then the defaults not yet written"
        );
    }

    #[test]
    fn a_rule_after_a_deny_of_it_is_written_again() {
        let fs = Opens::default();
        let rules = oci(
            r#"[{"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
                {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "rw"},
                {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]"#,
        );
        apply_v1(&fs, Path::new("/cg"), &rules).unwrap();
        let opens = fs.take();
        let files: Vec<&str> = opens.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            files,
            [
                "devices.deny",
                "devices.allow",
                "devices.deny",
                "devices.allow"
            ]
        );
        assert_eq!(opens[3].1[0], "c 10:229 rw", "{opens:?}");
    }

    #[test]
    fn a_pool_slot_gets_only_the_allows_it_lacks_through_one_open() {
        let fs = Opens {
            list: DEFAULT_ALLOWED_DEVICES.join("\n"),
            ..Default::default()
        };
        apply_v1_on_baseline(&fs, Path::new("/cg"), &oci(CONTAINERD)).unwrap();
        assert_eq!(
            fs.take(),
            [(
                "devices.allow".to_string(),
                vec!["c 10:200 rwm".to_string()]
            )]
        );
    }

    /// The kernel's (and runc's) list after the written rules is the one
    /// after every rule, for many lists of a few overlapping rules.
    #[test]
    fn dropping_repeats_never_changes_the_resulting_list() {
        let pool: Vec<Rule> = [
            "a *:* rwm",
            "c 1:3 rwm",
            "c 1:3 r",
            "c 1:* rwm",
            "b 8:0 rw",
            "c *:* m",
        ]
        .iter()
        .flat_map(|s| {
            let r = Rule::parse_allow(s).unwrap();
            [r, Rule { allow: false, ..r }]
        })
        .collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        let (mut compared, mut dropped) = (0, 0);
        for _ in 0..3000 {
            let list: Vec<Rule> = (0..next(14)).map(|_| pool[next(pool.len())]).collect();
            let mut all = Emulator::default();
            if list.iter().try_for_each(|r| all.apply(r)).is_err() {
                continue;
            }
            let written: Vec<Rule> = runs(&list).into_iter().flat_map(|(_, r)| r).collect();
            dropped += list.len() - written.len();
            let mut after = Emulator::default();
            written.iter().try_for_each(|r| after.apply(r)).unwrap();
            assert_eq!(after, all, "{list:?}");
            compared += 1;
        }
        assert!(
            compared > 1000 && dropped > 500,
            "{compared} lists, {dropped} dropped"
        );
    }
}
