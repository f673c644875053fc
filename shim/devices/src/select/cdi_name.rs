//! Fully-qualified CDI device names: `vendor.com/class=name`.
//!
//! The CDI spec's naming rules, with the reason of a rejection kept for the error message.

use serde::{Deserialize, Serialize};

/// A parsed `vendor/class=name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CdiName {
    pub vendor: String,
    pub class: String,
    pub name: String,
}

impl std::fmt::Display for CdiName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}={}", self.vendor, self.class, self.name)
    }
}

fn check(what: &str, s: &str, extra: &[char], letter_first: bool) -> Result<(), String> {
    let first = s.chars().next().ok_or_else(|| format!("empty {what}"))?;
    let last = s.chars().last().unwrap_or(first);
    if letter_first && !first.is_ascii_alphabetic() {
        return Err(format!("{what} {s:?} must start with a letter"));
    }
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return Err(format!(
            "{what} {s:?} must start and end with a letter or digit"
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !extra.contains(c))
    {
        return Err(format!("{what} {s:?} contains invalid character {c:?}"));
    }
    Ok(())
}

/// Checks a spec's `kind` (`vendor/class`); returns (vendor, class).
pub(crate) fn parse_kind(kind: &str) -> Result<(&str, &str), String> {
    let (vendor, class) = kind
        .split_once('/')
        .ok_or("expected vendor/class (no '/')")?;
    check("vendor", vendor, &['.', '-', '_'], true)?;
    check("class", class, &['-', '_'], true)?;
    Ok((vendor, class))
}

/// Checks an unqualified device name.
pub(crate) fn check_device_name(name: &str) -> Result<(), String> {
    check("device name", name, &['.', '-', '_', ':'], false)
}

impl CdiName {
    /// Parses and validates a fully-qualified name; the error says what is wrong.
    pub fn parse(s: &str) -> Result<CdiName, String> {
        let (kind, name) = s
            .split_once('=')
            .ok_or("expected vendor/class=name (no '=')")?;
        if !kind.contains('/') {
            return Err("expected vendor/class=name (no '/' in the kind)".into());
        }
        let (vendor, class) = parse_kind(kind)?;
        check_device_name(name)?;
        Ok(CdiName {
            vendor: vendor.into(),
            class: class.into(),
            name: name.into(),
        })
    }

    /// `vendor/class`.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names() {
        let n = CdiName::parse("nvidia.com/gpu=0").unwrap();
        assert_eq!(
            (n.vendor.as_str(), n.class.as_str(), n.name.as_str()),
            ("nvidia.com", "gpu", "0")
        );
        assert_eq!(n.to_string(), "nvidia.com/gpu=0");
        assert!(CdiName::parse("rund.io/rdma=mlx5_0").is_ok());
        assert!(CdiName::parse("nvidia.com/gpu=GPU-1234:5").is_ok());
    }

    #[test]
    fn bad_names() {
        for bad in [
            "nvidia.com/gpu",
            "gpu=0",
            "nvidia.com/=0",
            "/gpu=0",
            "nvidia.com/gpu=",
            "nvidia.com/gpu=-0",
            "nvidia.com/g.pu=0",
            "nvidia.com/gpu=a b",
            "nvidia.com/gpu=a/b",
            // Found by fuzzing: a digit first passed, which no CDI spec
            // file can declare.
            "0/gpu=0",
            "nvidia.com/3d=0",
        ] {
            assert!(CdiName::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
