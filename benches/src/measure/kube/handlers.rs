//! The three CRI runtime handlers compared in one containerd: runc-v2, and
//! rund twice with different configs (`ConfigPath` in each handler's
//! options): the cgroup pool on and off, each with its own state dirs and
//! its own phases file.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// One handler of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Handler {
    /// The CRI runtime handler name.
    pub name: &'static str,
    /// What the report calls it.
    pub label: &'static str,
    /// rund's config file (`None` for runc).
    pub config: Option<PathBuf>,
    /// The shim's `[trace] phases_file` (rund only).
    pub phases: Option<PathBuf>,
    /// Why it was not measured (e.g. the shim did not honour its config).
    pub skipped: Option<String>,
}

pub const RUNC: &str = "runc";
/// The harness's own rund handler carries the pool-on config.
pub const RUND_POOL_ON: &str = "rund";
pub const RUND_POOL_OFF: &str = "rund-nopool";

/// rund's config for one variant.
pub fn rund_config(dir: &Path, pool: &str, phases: &Path) -> String {
    format!(
        "state_dir = {:?}\n[cgroup]\npool = {pool:?}\nstate_dir = {:?}\n[trace]\nphases_file = {:?}\n",
        dir.join(format!("state-{pool}")).display().to_string(),
        dir.join(format!("pool-{pool}")).display().to_string(),
        phases.display().to_string(),
    )
}

/// Writes both rund configs into `dir`; the handlers in report order.
pub fn prepare(dir: &Path, with_rund: bool) -> std::io::Result<Vec<Handler>> {
    let mut out = vec![Handler {
        name: RUNC,
        label: "runc-v2",
        config: None,
        phases: None,
        skipped: None,
    }];
    if !with_rund {
        return Ok(out);
    }
    std::fs::create_dir_all(dir)?;
    for (name, label, pool) in [
        (RUND_POOL_ON, "rund pool on", "on"),
        (RUND_POOL_OFF, "rund pool off", "off"),
    ] {
        let phases = dir.join(format!("phases-{pool}.jsonl"));
        let cfg = dir.join(format!("rund-pool-{pool}.toml"));
        std::fs::write(&cfg, rund_config(dir, pool, &phases))?;
        out.push(Handler {
            name,
            label,
            config: Some(cfg),
            phases: Some(phases),
            skipped: None,
        });
    }
    Ok(out)
}

/// The CRI runtime table for the second rund handler, appended to the
/// harness's config.toml (`cri_plugin`: containerd 1.6's
/// `io.containerd.grpc.v1.cri`, 2.x's `io.containerd.cri.v1.runtime`).
pub fn extra_runtime(cri_plugin: &str, name: &str, config: &Path, v2x: bool) -> String {
    let t = format!("plugins.{cri_plugin:?}.containerd.runtimes.{name}");
    format!(
        "\n[{t}]\n  runtime_type = \"io.containerd.rund.v2\"\n{}  pod_annotations = [\"*\", \"*/*\"]\n\n\
         [{t}.options]\n  ConfigPath = {:?}\n",
        if v2x {
            "  sandboxer = \"podsandbox\"\n"
        } else {
            ""
        },
        config.display().to_string()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_valid_toml_with_their_own_state() {
        let t = tempfile::tempdir().unwrap();
        let hs = prepare(t.path(), true).unwrap();
        assert_eq!(
            hs.iter().map(|h| h.name).collect::<Vec<_>>(),
            [RUNC, RUND_POOL_ON, RUND_POOL_OFF]
        );
        let mut states = Vec::new();
        for (h, pool) in hs[1..].iter().zip(["on", "off"]) {
            let text = std::fs::read_to_string(h.config.as_ref().unwrap()).unwrap();
            let v: toml::Value = toml::from_str(&text).unwrap();
            assert_eq!(v["cgroup"]["pool"].as_str(), Some(pool));
            assert_eq!(
                v["trace"]["phases_file"].as_str().map(PathBuf::from),
                h.phases.clone()
            );
            states.push(v["state_dir"].as_str().unwrap().to_string());
            states.push(v["cgroup"]["state_dir"].as_str().unwrap().to_string());
        }
        states.sort();
        states.dedup();
        assert_eq!(states.len(), 4, "every state dir is its own: {states:?}");
        assert_eq!(prepare(t.path(), false).unwrap().len(), 1);
    }

    #[test]
    fn the_extra_runtime_is_valid_toml() {
        let p = "io.containerd.grpc.v1.cri";
        let text = extra_runtime(p, RUND_POOL_OFF, Path::new("/x/off.toml"), false);
        let v: toml::Value = toml::from_str(&text).unwrap();
        let rt = &v["plugins"][p]["containerd"]["runtimes"][RUND_POOL_OFF];
        assert_eq!(rt["runtime_type"].as_str(), Some("io.containerd.rund.v2"));
        assert_eq!(rt["options"]["ConfigPath"].as_str(), Some("/x/off.toml"));
        assert!(rt.get("sandboxer").is_none());
        let text = extra_runtime("io.containerd.cri.v1.runtime", "r", Path::new("/c"), true);
        assert!(text.contains("sandboxer = \"podsandbox\""), "{text}");
    }
}
