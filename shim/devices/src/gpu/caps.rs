//! `NVIDIA_DRIVER_CAPABILITIES`: which driver files a container gets.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{DeviceError, Result};

/// One driver capability of the NVIDIA container toolkit's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    Compute,
    Compat32,
    Graphics,
    Utility,
    Video,
    Display,
    Ngx,
}

impl Capability {
    pub const ALL: [Capability; 7] = [
        Capability::Compute,
        Capability::Compat32,
        Capability::Graphics,
        Capability::Utility,
        Capability::Video,
        Capability::Display,
        Capability::Ngx,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Compute => "compute",
            Capability::Compat32 => "compat32",
            Capability::Graphics => "graphics",
            Capability::Utility => "utility",
            Capability::Video => "video",
            Capability::Display => "display",
            Capability::Ngx => "ngx",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Capability::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A set of capabilities; the default is `utility,compute`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverCapabilities(pub BTreeSet<Capability>);

impl Default for DriverCapabilities {
    fn default() -> Self {
        DriverCapabilities([Capability::Utility, Capability::Compute].into())
    }
}

impl DriverCapabilities {
    /// Parses `utility,compute` or `all`; empty means the default.
    pub fn parse(value: &str) -> Result<Self> {
        let mut set = BTreeSet::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                set.extend(Capability::ALL);
                continue;
            }
            let cap = Capability::parse(item).ok_or_else(|| DeviceError::InvalidRequest {
                source_name: "NVIDIA_DRIVER_CAPABILITIES".into(),
                value: value.into(),
                reason: format!(
                    "unknown capability {item:?} (known: all, {})",
                    Capability::ALL.map(Capability::as_str).join(", ")
                ),
            })?;
            set.insert(cap);
        }
        if set.is_empty() {
            return Ok(Self::default());
        }
        Ok(DriverCapabilities(set))
    }

    pub fn contains(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }
}

impl fmt::Display for DriverCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<&str> = self.0.iter().map(|c| c.as_str()).collect();
        f.write_str(&v.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_parse() {
        assert_eq!(
            DriverCapabilities::parse("").unwrap().to_string(),
            "compute,utility"
        );
        assert_eq!(
            DriverCapabilities::parse(" video , utility")
                .unwrap()
                .to_string(),
            "utility,video"
        );
        assert_eq!(DriverCapabilities::parse("all").unwrap().0.len(), 7);
        let err = DriverCapabilities::parse("compute,warp").unwrap_err();
        assert!(err.to_string().contains("\"warp\""), "{err}");
    }
}
