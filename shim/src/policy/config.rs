//! `[policy]` in config.toml: the bounds of what pods may ask for. Every
//! key defaults to "not honoured".

use serde::{Deserialize, Serialize};

use rund_devices::select::CdiName;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Honour `rund.io/userns: host` under `[userns] mode = "always"`.
    pub allow_userns_host: bool,
    /// Highest `rund.io/memlock` above the limit the pod inherits:
    /// "unlimited" or a byte count. Unset: no raise is honoured.
    pub max_memlock: Option<String>,
    /// Highest `rund.io/grace-period-seconds` (or `grace_period_seconds`,
    /// if that is larger).
    pub max_grace_period_seconds: u32,
    /// GPUs a pod may name with `rund.io/gpus` (or `NVIDIA_VISIBLE_DEVICES`
    /// when accepted): "all", "none" (driver only), indices, `GPU-<uuid>`.
    pub allowed_gpus: Vec<String>,
    /// RDMA devices a pod may name with `rund.io/rdma-devices`: "all" or
    /// device names (a netdev request is checked by the devices it maps to).
    pub allowed_rdma_devices: Vec<String>,
    /// CDI devices a *pod* annotation may name (container annotations, the
    /// device plugin's, need no entry): `vendor/class=name` or `vendor/class=*`.
    pub allowed_cdi_devices: Vec<String>,
    /// Treat `NVIDIA_VISIBLE_DEVICES` from the image or pod env as a GPU
    /// request (bounded by `allowed_gpus`); off, it is ignored.
    pub accept_nvidia_visible_devices_env: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            allow_userns_host: false,
            max_memlock: None,
            max_grace_period_seconds: 30,
            allowed_gpus: Vec::new(),
            allowed_rdma_devices: Vec::new(),
            allowed_cdi_devices: Vec::new(),
            accept_nvidia_visible_devices_env: false,
        }
    }
}

/// A `[policy]` value serde accepts but rund does not; names the key.
#[derive(Debug, thiserror::Error)]
pub enum PolicyConfigError {
    #[error(transparent)]
    Memlock(#[from] crate::rlimit::RlimitError),
    #[error("[policy] allowed_gpus: {0:?} is not \"all\", \"none\", an index or a GPU-<uuid>")]
    Gpu(String),
    #[error("[policy] allowed_rdma_devices: {0:?} is not \"all\" or an RDMA device name")]
    Rdma(String),
    #[error("[policy] allowed_cdi_devices: {name:?}: {reason} (or vendor/class=*)")]
    Cdi { name: String, reason: String },
}

impl PolicyConfig {
    /// Checks the values serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        if let Some(v) = &self.max_memlock {
            crate::rlimit::memlock::parse_limit("[policy] max_memlock", v)?;
        }
        for g in &self.allowed_gpus {
            let ok = matches!(g.as_str(), "all" | "none")
                || (!g.is_empty() && g.chars().all(|c| c.is_ascii_digit()))
                || (g.starts_with("GPU-") && !g.contains([',', ' ', '/']));
            if !ok {
                return Err(PolicyConfigError::Gpu(g.clone()));
            }
        }
        for r in &self.allowed_rdma_devices {
            if r.is_empty() || r.contains([',', '/', ':', ' ']) {
                return Err(PolicyConfigError::Rdma(r.clone()));
            }
        }
        for c in &self.allowed_cdi_devices {
            let concrete = match c.strip_suffix("=*") {
                Some(kind) => format!("{kind}=x"),
                None => c.clone(),
            };
            CdiName::parse(&concrete).map_err(|reason| PolicyConfigError::Cdi {
                name: c.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    /// Whether a pod annotation may name this CDI device.
    pub fn allows_cdi(&self, name: &CdiName) -> bool {
        let full = name.to_string();
        let any = format!("{}=*", name.kind());
        self.allowed_cdi_devices
            .iter()
            .any(|a| *a == full || *a == any)
    }

    /// Whether the GPU with this index and UUID may be requested.
    pub fn allows_gpu(&self, index: u32, uuid: &str) -> bool {
        self.allowed_gpus
            .iter()
            .any(|a| a == "all" || *a == index.to_string() || a.eq_ignore_ascii_case(uuid))
    }

    /// Whether the RDMA device may be requested.
    pub fn allows_rdma(&self, name: &str) -> bool {
        self.allowed_rdma_devices
            .iter()
            .any(|a| a == "all" || a == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<PolicyConfig, crate::config::ConfigError> {
        crate::config::RundConfig::parse(text, Path::new("p.toml")).map(|c| c.policy)
    }

    #[test]
    fn defaults_deny() {
        let p = PolicyConfig::default();
        assert!(!p.allow_userns_host && !p.accept_nvidia_visible_devices_env);
        assert!(p.max_memlock.is_none());
        assert!(!p.allows_gpu(0, "GPU-x") && !p.allows_rdma("mlx5_0"));
        assert!(!p.allows_cdi(&CdiName::parse("nvidia.com/gpu=0").unwrap()));
    }

    #[test]
    fn allow_lists_match_exactly_or_by_wildcard() {
        let p = parse(
            "[policy]\nallowed_gpus = [\"1\", \"GPU-abc\"]\nallowed_rdma_devices = [\"mlx5_0\"]\n\
             allowed_cdi_devices = [\"nvidia.com/gpu=*\", \"rund.io/rdma=mlx5_1\"]\n",
        )
        .unwrap();
        assert!(p.allows_gpu(1, "GPU-zzz") && p.allows_gpu(0, "gpu-ABC"));
        assert!(!p.allows_gpu(0, "GPU-zzz"));
        assert!(p.allows_rdma("mlx5_0") && !p.allows_rdma("mlx5_1"));
        let cdi = |n: &str| p.allows_cdi(&CdiName::parse(n).unwrap());
        assert!(cdi("nvidia.com/gpu=7") && cdi("rund.io/rdma=mlx5_1"));
        assert!(!cdi("rund.io/rdma=mlx5_0") && !cdi("nvidia.com/gpux=0"));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (text, key) in [
            ("[policy]\nmax_memlock = \"lots\"\n", "max_memlock"),
            ("[policy]\nallowed_gpus = [\"gpu0\"]\n", "allowed_gpus"),
            (
                "[policy]\nallowed_rdma_devices = [\"a/b\"]\n",
                "allowed_rdma_devices",
            ),
            (
                "[policy]\nallowed_cdi_devices = [\"nvidia.com/gpu\"]\n",
                "allowed_cdi_devices",
            ),
            ("[policy]\nallow_everything = true\n", "allow_everything"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        assert_eq!(
            parse("[policy]\nmax_memlock = \"unlimited\"\n")
                .unwrap()
                .max_memlock
                .as_deref(),
            Some("unlimited")
        );
    }
}
