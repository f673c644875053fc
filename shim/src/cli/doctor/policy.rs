//! The policy in force, as `rund doctor` prints it: every `[policy]` key
//! with what it lets pods do, so an admin sees what is honoured.

use std::io::Write;

use super::probe::UsernsFacts;
use crate::config::{OnPrivileged, OnUnsupported, PolicyConfig, RemapMode};

/// `[userns]` mode and exemptions, on one line.
pub fn userns_line(u: &UsernsFacts) -> String {
    let mode = match u.mode {
        RemapMode::Requested => "mode requested (pods that ask)",
        RemapMode::Always => "mode always (every pod)",
    };
    let privileged = match u.on_privileged {
        OnPrivileged::Refuse => "refuse",
        OnPrivileged::Host => "host",
    };
    let unsupported = match u.on_unsupported {
        OnUnsupported::Fail => "fail",
        OnUnsupported::Host => "host",
    };
    format!("{mode}, on_privileged {privileged}, on_unsupported {unsupported}")
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

pub fn render(p: &PolicyConfig, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "policy ([policy], what pods may ask for):")?;
    let host = if p.allow_userns_host {
        "honoured"
    } else {
        "refused under mode always"
    };
    writeln!(out, "  allow_userns_host                   {host}")?;
    let memlock = match &p.max_memlock {
        Some(m) => format!("{m} (rund.io/memlock above the inherited limit)"),
        None => "unset: rund.io/memlock may not raise the inherited limit".into(),
    };
    writeln!(out, "  max_memlock                         {memlock}")?;
    writeln!(
        out,
        "  max_grace_period_seconds            {}",
        p.max_grace_period_seconds
    )?;
    writeln!(
        out,
        "  allowed_gpus                        {}",
        list(&p.allowed_gpus)
    )?;
    writeln!(
        out,
        "  allowed_rdma_devices                {}",
        list(&p.allowed_rdma_devices)
    )?;
    writeln!(
        out,
        "  allowed_cdi_devices (pod-level)     {}",
        list(&p.allowed_cdi_devices)
    )?;
    let env = if p.accept_nvidia_visible_devices_env {
        "accepted (bounded by allowed_gpus)"
    } else {
        "ignored"
    };
    writeln!(out, "  NVIDIA_VISIBLE_DEVICES from env     {env}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_every_key_and_the_defaults_deny() {
        let mut out = Vec::new();
        render(&PolicyConfig::default(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for needle in [
            "allow_userns_host                   refused",
            "max_memlock                         unset",
            "max_grace_period_seconds            30",
            "allowed_gpus                        none",
            "allowed_rdma_devices                none",
            "allowed_cdi_devices (pod-level)     none",
            "NVIDIA_VISIBLE_DEVICES from env     ignored",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let p = PolicyConfig {
            allowed_gpus: vec!["0".into(), "GPU-x".into()],
            max_memlock: Some("unlimited".into()),
            ..Default::default()
        };
        let mut out = Vec::new();
        render(&p, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("allowed_gpus                        0, GPU-x"),
            "{text}"
        );
        assert!(
            text.contains("max_memlock                         unlimited"),
            "{text}"
        );
    }
}
