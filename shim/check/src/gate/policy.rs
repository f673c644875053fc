//! Gate policy from config: `verify = require | warn | off`, and the threshold as a fraction
//! of the port's rated speed (sysfs `rate`) or an absolute MiB/s figure.

use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// A failing or unverifiable device fails the request.
    #[default]
    Require,
    /// Failures are logged and annotated, the device is injected anyway.
    Warn,
    /// No check.
    Off,
}

impl FromStr for Verify {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "require" => Ok(Verify::Require),
            "warn" => Ok(Verify::Warn),
            "off" => Ok(Verify::Off),
            o => Err(format!("verify must be require, warn or off, not {o:?}")),
        }
    }
}

/// Minimum BW average a device must reach.
///
/// Config forms: a number in (0, 1] or `"80%"` is a fraction of the rated speed;
/// `"10000MiB/s"` (or `"10000 MiB/s"`) is absolute.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ThresholdRepr", into = "String")]
pub enum Threshold {
    FractionOfRate(f64),
    MiBps(f64),
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold::FractionOfRate(0.5)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ThresholdRepr {
    Num(f64),
    Str(String),
}

impl TryFrom<ThresholdRepr> for Threshold {
    type Error = String;
    fn try_from(r: ThresholdRepr) -> Result<Self, String> {
        match r {
            ThresholdRepr::Num(f) => Threshold::fraction(f),
            ThresholdRepr::Str(s) => s.parse(),
        }
    }
}

impl From<Threshold> for String {
    fn from(t: Threshold) -> String {
        t.to_string()
    }
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threshold::FractionOfRate(x) => write!(f, "{}%", x * 100.0),
            Threshold::MiBps(x) => write!(f, "{x}MiB/s"),
        }
    }
}

impl Threshold {
    fn fraction(f: f64) -> Result<Self, String> {
        if f.is_finite() && f > 0.0 && f <= 1.0 {
            Ok(Threshold::FractionOfRate(f))
        } else {
            Err(format!("threshold fraction {f} must be in (0, 1]"))
        }
    }

    /// The threshold in MiB/s given the rated speed (None when it needs a rate we lack).
    pub fn mib_per_sec(&self, rated_mib: Option<f64>) -> Option<f64> {
        match *self {
            Threshold::FractionOfRate(f) => rated_mib.map(|r| r * f),
            Threshold::MiBps(x) => Some(x),
        }
    }
}

impl FromStr for Threshold {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let num = |x: &str| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("bad threshold {s:?}"))
        };
        if let Some(p) = t.strip_suffix('%') {
            return Threshold::fraction(num(p)? / 100.0);
        }
        if let Some(m) = t.strip_suffix("MiB/s") {
            let v = num(m)?;
            return if v.is_finite() && v > 0.0 {
                Ok(Threshold::MiBps(v))
            } else {
                Err(format!("threshold {s:?} must be positive"))
            };
        }
        Threshold::fraction(num(t)?)
    }
}

/// Parses sysfs `rate`, e.g. "100 Gb/sec (4X EDR)" -> 100.0 Gb/s.
pub fn parse_rate_gbps(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let v: f64 = it.next()?.parse().ok()?;
    match it.next()? {
        "Gb/sec" => Some(v),
        "Mb/sec" => Some(v / 1000.0),
        _ => None,
    }
    .filter(|g| g.is_finite() && *g > 0.0)
}

/// Gb/s (10^9 bits) to MiB/s (2^20 bytes).
pub fn gbps_to_mib(g: f64) -> f64 {
    g * 1e9 / 8.0 / 1_048_576.0
}

/// `<sysfs>/class/infiniband/<dev>/ports/<port>/state`, e.g. "4: ACTIVE" -> "ACTIVE".
pub fn port_state_from_sysfs(sysfs: &Path, device: &str, port: u8) -> Option<String> {
    let p = sysfs
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("state");
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    Some(
        s.split_once(':')
            .map_or(s, |(_, name)| name.trim())
            .to_string(),
    )
}

/// The rated speed of `<sysfs>/class/infiniband/<dev>/ports/<port>/rate` in MiB/s.
pub fn rated_mib_from_sysfs(sysfs: &Path, device: &str, port: u8) -> Option<f64> {
    let p = sysfs
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("rate");
    let s = std::fs::read_to_string(p).ok()?;
    parse_rate_gbps(&s).map(gbps_to_mib)
}
