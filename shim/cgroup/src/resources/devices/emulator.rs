//! What a rule list means, computed as the v1 kernel (and runc's emulator)
//! computes it, so both cgroup versions give a spec the same devices:
//!
//! * the policy starts as deny-all; a type-`a` rule resets it to deny-all or
//!   allow-all with no exceptions;
//! * a rule with the policy's opposite action adds an exception (access bits
//!   of the same type/major/minor merge);
//! * a rule with the policy's own action removes access bits from the
//!   exception with exactly that type/major/minor. Removing bits that a
//!   *wider* wildcard exception grants is refused, as runc refuses it: v1
//!   would silently keep them.
//!
//! A request is an exception's when the type is equal, major and minor are
//! equal or wildcards, and the requested access is a subset of the
//! exception's access.

use super::{Kind, Rule};
use std::collections::BTreeMap;

/// An exception's key; ordered by (major, minor, type) like runc, with the
/// wildcard first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub kind: Kind,
}

/// The effective policy: a default and the exceptions to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Emulator {
    pub default_allow: bool,
    pub exceptions: BTreeMap<Key, u8>,
}

fn show(k: &Key, bits: u8) -> String {
    Rule {
        allow: true,
        kind: k.kind,
        major: k.major,
        minor: k.minor,
        access: bits,
    }
    .v1_string()
}

impl Emulator {
    pub fn is_allow_all(&self) -> bool {
        self.default_allow && self.exceptions.is_empty()
    }

    pub fn apply(&mut self, r: &Rule) -> Result<(), String> {
        if r.kind == Kind::All {
            *self = Emulator {
                default_allow: r.allow,
                exceptions: BTreeMap::new(),
            };
            return Ok(());
        }
        let key = Key {
            major: r.major,
            minor: r.minor,
            kind: r.kind,
        };
        if r.allow != self.default_allow {
            *self.exceptions.entry(key).or_insert(0) |= r.access;
            return Ok(());
        }
        for wider in [
            Key { major: None, ..key },
            Key { minor: None, ..key },
            Key {
                major: None,
                minor: None,
                ..key
            },
        ] {
            if wider == key {
                continue;
            }
            let have = self.exceptions.get(&wider).copied().unwrap_or(0);
            if have & r.access != 0 {
                return Err(format!(
                    "{} {} cannot punch a hole in the earlier wildcard rule {} {} \
                     (cgroup v1 would ignore it, so runc refuses it)",
                    if r.allow { "allow" } else { "deny" },
                    show(&key, r.access),
                    if self.default_allow { "deny" } else { "allow" },
                    show(&wider, have),
                ));
            }
        }
        if let Some(bits) = self.exceptions.get_mut(&key) {
            *bits &= !r.access;
            if *bits == 0 {
                self.exceptions.remove(&key);
            }
        }
        Ok(())
    }

    /// Whether a request (type, numbers, access bits) is allowed.
    #[cfg(test)]
    pub fn allows(&self, kind: Kind, major: u32, minor: u32, access: u8) -> bool {
        let hit = self.exceptions.iter().any(|(k, bits)| {
            k.kind == kind
                && k.major.is_none_or(|m| m == major)
                && k.minor.is_none_or(|m| m == minor)
                && access & !bits & super::acc::ALL == 0
        });
        hit != self.default_allow
    }
}

#[cfg(test)]
mod tests {
    use super::super::{acc, full_list};
    use super::*;

    fn emu(json: &str) -> Result<Emulator, String> {
        let rules: Vec<oci_spec::runtime::LinuxDeviceCgroup> = serde_json::from_str(json).unwrap();
        let mut e = Emulator::default();
        for r in full_list(&rules).map_err(|e| e.to_string())? {
            e.apply(&r)?;
        }
        Ok(e)
    }

    const RW: u8 = acc::READ | acc::WRITE;

    #[test]
    fn no_rules_is_the_default_list_only() {
        let e = emu("[]").unwrap();
        assert!(!e.default_allow);
        assert!(e.allows(Kind::Char, 1, 3, RW), "null");
        assert!(e.allows(Kind::Char, 136, 7, RW), "pts");
        assert!(e.allows(Kind::Block, 8, 0, acc::MKNOD), "mknod of anything");
        assert!(!e.allows(Kind::Block, 8, 0, acc::READ));
        assert!(!e.allows(Kind::Char, 10, 229, acc::READ), "fuse");
    }

    #[test]
    fn later_rules_override_earlier_ones() {
        let allow_all_then_deny =
            r#"[{"allow": true, "access": "rwm"}, {"allow": false, "access": "rwm"}]"#;
        assert!(!emu(allow_all_then_deny)
            .unwrap()
            .allows(Kind::Char, 10, 229, acc::READ));
        let deny_then_allow = r#"[{"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]"#;
        let e = emu(deny_then_allow).unwrap();
        assert!(e.allows(Kind::Char, 10, 229, RW));
        assert!(!e.allows(Kind::Char, 10, 229, acc::ALL), "m is not granted");
        // An exact deny after an exact allow removes it again.
        let removed = r#"[{"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"},
            {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "w"}]"#;
        let e = emu(removed).unwrap();
        assert!(e.allows(Kind::Char, 10, 229, acc::READ));
        assert!(!e.allows(Kind::Char, 10, 229, acc::WRITE));
    }

    #[test]
    fn allow_all_mode_keeps_deny_exceptions() {
        let e = emu(r#"[{"allow": true, "access": "rwm"},
            {"allow": false, "type": "b", "major": 8, "access": "w"}]"#)
        .unwrap();
        assert!(e.default_allow);
        assert!(!e.allows(Kind::Block, 8, 1, acc::WRITE));
        assert!(e.allows(Kind::Block, 8, 1, acc::READ));
        assert!(e.allows(Kind::Char, 8, 1, acc::WRITE), "type matters");
    }

    #[test]
    fn punching_a_hole_in_a_wildcard_is_refused() {
        let e = emu(
            r#"[{"allow": true, "type": "c", "major": 10, "access": "rwm"},
            {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "rwm"}]"#,
        )
        .unwrap_err();
        assert!(
            e.contains("punch a hole") && e.contains("c 10:* rwm"),
            "{e}"
        );
    }
}
