//! Device cgroup rules, with runc's semantics on both cgroup versions: deny
//! by default, the spec's rules in order (a later rule overrides an earlier
//! one), then [`DEFAULT_ALLOWED_DEVICES`]. v1 writes them to
//! `devices.allow`/`devices.deny`; v2 compiles them into a BPF program.

mod emulator;
#[cfg(test)]
mod interp;
mod program;
pub(crate) mod v1;
mod v2;

pub(crate) use emulator::Emulator;
pub(crate) use program::program;
pub(crate) use v2::{apply_v2, clear_v2};

use crate::error::{Error, Result};
use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType,
};

/// Devices every container may use, appended after the spec's rules as runc
/// does: mknod of any node, null, zero, full, random, urandom, tty, console,
/// ptmx and the pts slaves. A spec without rules gets exactly these.
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

/// Which nodes a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// `a`: every device; the rule resets the whole list.
    All,
    Block,
    Char,
}

/// Access bits, with the kernel's BPF values (`BPF_DEVCG_ACC_*`).
pub(crate) mod acc {
    pub const MKNOD: u8 = 1;
    pub const READ: u8 = 2;
    pub const WRITE: u8 = 4;
    pub const ALL: u8 = MKNOD | READ | WRITE;
}

/// `BPF_DEVCG_DEV_*`: the type in the low half of the program's `access_type`.
pub(crate) mod dev {
    pub const BLOCK: u32 = 1;
    pub const CHAR: u32 = 2;
}

/// One validated rule. `None` major or minor is the wildcard `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub allow: bool,
    pub kind: Kind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: u8,
}

fn parse_access(s: &str) -> std::result::Result<u8, String> {
    if s.is_empty() {
        return Err("access cannot be empty (use a combination of r, w and m)".into());
    }
    let mut bits = 0;
    for c in s.chars() {
        bits |= match c {
            'r' => acc::READ,
            'w' => acc::WRITE,
            'm' => acc::MKNOD,
            _ => return Err(format!("access {s:?} has {c:?} (only r, w and m)")),
        };
    }
    Ok(bits)
}

fn access_string(bits: u8) -> String {
    [(acc::READ, 'r'), (acc::WRITE, 'w'), (acc::MKNOD, 'm')]
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, c)| *c)
        .collect()
}

fn number(v: Option<i64>, what: &str) -> std::result::Result<Option<u32>, String> {
    match v {
        // runc: a missing or negative number is the wildcard.
        None => Ok(None),
        Some(v) if v < 0 => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("{what} {v} is out of range")),
    }
}

impl Rule {
    /// Validate one OCI rule (`i` names it in the error).
    pub fn from_oci(r: &LinuxDeviceCgroup, i: usize) -> Result<Rule> {
        let bad = |reason: String| Error::InvalidResource {
            field: "devices",
            reason: format!("linux.resources.devices[{i}]: {reason}"),
        };
        let kind = match r.typ() {
            None | Some(LinuxDeviceType::A) => Kind::All,
            Some(LinuxDeviceType::B) => Kind::Block,
            Some(LinuxDeviceType::C) => Kind::Char,
            Some(t) => {
                return Err(bad(format!(
                    "type {:?} is not a cgroup device type (a, b or c)",
                    t.as_str()
                )))
            }
        };
        Ok(Rule {
            allow: r.allow(),
            kind,
            major: number(r.major(), "major").map_err(bad)?,
            minor: number(r.minor(), "minor").map_err(bad)?,
            access: parse_access(r.access().as_deref().unwrap_or("")).map_err(bad)?,
        })
    }

    /// An allow rule in the kernel's `type major:minor access` form.
    pub fn parse_allow(s: &str) -> std::result::Result<Rule, String> {
        let f: Vec<&str> = s.split([' ', ':']).collect();
        let [t, ma, mi, a] = f.as_slice() else {
            return Err(format!("malformed device rule {s:?}"));
        };
        let kind = match *t {
            "a" => Kind::All,
            "b" => Kind::Block,
            "c" => Kind::Char,
            _ => return Err(format!("unknown device type in {s:?}")),
        };
        let num = |v: &str| -> std::result::Result<Option<u32>, String> {
            if v == "*" {
                return Ok(None);
            }
            v.parse()
                .map(Some)
                .map_err(|_| format!("bad number in {s:?}"))
        };
        Ok(Rule {
            allow: true,
            kind,
            major: num(ma)?,
            minor: num(mi)?,
            access: parse_access(a)?,
        })
    }

    /// The kernel's v1 form (`a` alone for every device).
    pub fn v1_string(&self) -> String {
        let t = match self.kind {
            Kind::All => return "a".into(),
            Kind::Block => 'b',
            Kind::Char => 'c',
        };
        let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
        format!(
            "{t} {}:{} {}",
            n(self.major),
            n(self.minor),
            access_string(self.access)
        )
    }
}

/// [`DEFAULT_ALLOWED_DEVICES`] as rules.
pub(crate) fn default_rules() -> Vec<Rule> {
    DEFAULT_ALLOWED_DEVICES
        .iter()
        .map(|s| Rule::parse_allow(s).expect("the default list parses"))
        .collect()
}

/// The spec's rules, validated, with the defaults appended.
pub(crate) fn full_list(rules: &[LinuxDeviceCgroup]) -> Result<Vec<Rule>> {
    let mut out = rules
        .iter()
        .enumerate()
        .map(|(i, r)| Rule::from_oci(r, i))
        .collect::<Result<Vec<_>>>()?;
    out.extend(default_rules());
    Ok(out)
}

/// The effective device policy of a rule list (defaults included), or a
/// clear error for a list runc refuses (a deny that would punch a hole in
/// an earlier wildcard allow, which cgroup v1 silently ignores).
pub(crate) fn emulate(rules: &[LinuxDeviceCgroup]) -> Result<Emulator> {
    let mut emu = Emulator::default();
    for (i, r) in full_list(rules)?.iter().enumerate() {
        emu.apply(r).map_err(|reason| Error::InvalidResource {
            field: "devices",
            reason: if i < rules.len() {
                format!("linux.resources.devices[{i}]: {reason}")
            } else {
                format!("the default rule {:?}: {reason}", r.v1_string())
            },
        })?;
    }
    Ok(emu)
}

/// Whether the rule list (defaults included) leaves every device allowed.
pub fn is_allow_all(rules: Option<&[LinuxDeviceCgroup]>) -> bool {
    emulate(rules.unwrap_or(&[])).is_ok_and(|e| e.is_allow_all())
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

    fn oci(json: &str) -> Vec<LinuxDeviceCgroup> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn rules_parse_and_print() {
        for s in DEFAULT_ALLOWED_DEVICES {
            assert_eq!(Rule::parse_allow(s).unwrap().v1_string(), *s);
        }
        let r = oci(r#"[{"allow": false, "access": "rwm"},
                        {"allow": true, "type": "c", "major": 1, "access": "wr"}]"#);
        let l = full_list(&r).unwrap();
        assert_eq!(l[0].v1_string(), "a");
        assert_eq!(l[1].v1_string(), "c 1:* rw");
        assert_eq!(l.len(), 2 + DEFAULT_ALLOWED_DEVICES.len());
    }

    #[test]
    fn bad_rules_name_the_index() {
        for (json, want) in [
            (
                r#"[{"allow": true, "type": "c", "major": 1}]"#,
                "devices[0]: access cannot be empty",
            ),
            (
                r#"[{"allow": true, "access": "rwm"}, {"allow": true, "access": "rx"}]"#,
                "devices[1]: access \"rx\"",
            ),
            (
                r#"[{"allow": true, "type": "u", "access": "r"}]"#,
                "not a cgroup device type",
            ),
            (
                r#"[{"allow": true, "type": "c", "major": 4294967296, "access": "r"}]"#,
                "out of range",
            ),
        ] {
            let e = full_list(&oci(json)).unwrap_err().to_string();
            assert!(e.contains(want), "{json}: {e}");
        }
    }

    #[test]
    fn allow_all_only_when_asked() {
        assert!(!is_allow_all(None), "no rules must not mean allow-all");
        assert!(!is_allow_all(Some(&oci(
            r#"[{"allow": false, "access": "rwm"}]"#
        ))));
        assert!(is_allow_all(Some(&oci(
            r#"[{"allow": true, "access": "rwm"}]"#
        ))));
        assert!(!is_allow_all(Some(&oci(
            r#"[{"allow": true, "access": "rwm"}, {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "rwm"}]"#
        ))));
    }
}
