//! `/etc/rund/config.toml` (or `$RUND_CONFIG`, or the runtime options'
//! `ConfigPath`). A missing file means defaults; a malformed one is an error.

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod userns;

pub use crate::policy::PolicyConfig;
pub use userns::{OnPrivileged, OnUnsupported, RemapMode, UsernsConfig};

pub const DEFAULT_PATH: &str = "/etc/rund/config.toml";
pub const ENV_PATH: &str = "RUND_CONFIG";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading rund config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("rund config {path} is malformed: {reason}")]
    Malformed { path: String, reason: String },
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RundConfig {
    /// Grace period for sandbox teardown when no annotation says otherwise.
    pub grace_period_seconds: u32,
    /// Path of rund-agent; default: next to the shim binary, then $PATH.
    pub agent_path: Option<PathBuf>,
    /// Where rund keeps node-wide state (leases, pools, check cache).
    pub state_dir: PathBuf,
    /// `[cgroup]`: the node-wide cgroup pool.
    pub cgroup: rund_cgroup::CgroupConfig,
    /// `[devices]`: GPU/RDMA discovery roots, NVML library, CDI dirs.
    pub devices: rund_devices::DeviceConfig,
    /// `[checks]`: where write_bw results are cached.
    pub checks: rund_check::GateConfig,
    /// `[verify]`: the write_bw gate policy for RDMA devices.
    pub verify: rund_check::GatePolicy,
    /// `[memlock]`: what RDMA pods get and what happens when it cannot be set.
    pub memlock: MemlockConfig,
    /// `[userns]`: which pods are remapped, and the per-pod id ranges.
    pub userns: UsernsConfig,
    /// `[policy]`: which privileged requests pods may make (deny by default).
    pub policy: PolicyConfig,
    /// `[init]`: the tini-like container init.
    pub init: InitConfig,
    /// `[trace]`: timing records for benchmarks.
    pub trace: TraceConfig,
    /// `[idle]`: what an idle shim and agent give back.
    pub idle: IdleConfig,
    /// `[shim]`: one shim process per pod, or one per node.
    pub shim: ShimConfig,
    /// `[sandbox]`: warm sandboxes.
    pub sandbox: SandboxConfig,
}

/// The most warm agents a node's shim keeps: each is a process with its
/// own namespaces, waiting.
pub const MAX_WARM: usize = 64;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Agents the node's shim launches ahead of any pod (per-node mode
    /// only: a per-pod shim lives no longer than its pod). A pod without a
    /// user namespace or hostPID claims one with one RPC; the pool refills
    /// in the background. 0: none.
    pub warm: usize,
    /// Per-pod mode: a new shim launches its pod's agent as it starts, in
    /// the warm template, while containerd is still on its way to Create;
    /// the pod claims it if it fits (no user namespace, no hostPID). It
    /// begins the cgroup of the pod's first container too (every pod).
    pub head_start: bool,
    /// Where the node's agent-root template is pinned (made by the first
    /// launch that needs it; see `rund-agent`'s `sandbox::template`). An
    /// agent without a user namespace starts in a copy of it: no copy of the
    /// host's mount table and no pivot_root per pod. "": every agent builds
    /// its own root.
    pub root_template: String,
}

/// The default pin of the agent-root template; the number is its layout's
/// version, so an upgraded agent never enters an older tree.
pub const ROOT_TEMPLATE: &str = "/run/rund/agent-root.1";

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            warm: 2,
            head_start: true,
            root_template: ROOT_TEMPLATE.into(),
        }
    }
}

impl SandboxConfig {
    /// The template's pin, if agents use one.
    pub fn root_template(&self) -> Option<String> {
        (!self.root_template.is_empty()).then(|| self.root_template.clone())
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ShimMode {
    /// One shim process per pod, as runc-v2 (the default).
    #[default]
    PerPod,
    /// One shim process serves every pod of a containerd namespace: `start`
    /// hands it each new pod, and a pod's overhead is its agent and inits.
    PerNode,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ShimConfig {
    pub mode: ShimMode,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IdleConfig {
    /// After this long with no request (the agent: no Start or Delete),
    /// the shim and the agent unmap the clean file pages (binary and
    /// library code) they touched, and the dead part of their main
    /// thread's stack: the page cache keeps the code, shared by every pod,
    /// and a page used again is mapped back by a minor fault. 0: never. A quarter second: the pages of a burst's pods go soon
    /// after each starts.
    pub trim_after_ms: u64,
    /// The delay instead when only polls (State, Stats, Pids, and the
    /// sandbox API's status, ping and metrics) came since the last trim:
    /// they map back the code the next poll runs again, and a trim and the
    /// faults after it cost 0.2-0.4 ms of CPU per poll (`make bench`:
    /// "shim CPU per State poll"). A minute covers the kubelet's stats
    /// polls; 0: polls alone never trim.
    pub trim_after_polls_ms: u64,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            trim_after_ms: 250,
            trim_after_polls_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TraceConfig {
    /// Append one JSON line per Create with the wall time of each phase
    /// (sandbox, devices, rootfs, cgroup, agent, place). Off by default.
    pub phases_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct InitConfig {
    /// Run rund-init as every container's PID 1 (unless `rund.io/init:
    /// "false"`). Off by default: the workload is PID 1, as with runc, and
    /// rund carries out the default action of a signal PID 1 does not handle.
    pub enabled: bool,
    /// Workloads that are inits themselves (basename of args[0]): no second init.
    pub skip_for: Vec<String>,
}

impl Default for InitConfig {
    fn default() -> Self {
        InitConfig {
            enabled: false,
            skip_for: [
                "tini",
                "dumb-init",
                "catatonit",
                "s6-svscan",
                "systemd",
                "init",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MemlockConfig {
    /// RLIMIT_MEMLOCK for containers with RDMA devices and no explicit limit:
    /// "unlimited" or a byte count.
    pub rdma_default: String,
    /// "error" (default) or "clamp-with-warning".
    pub on_failure: String,
}

impl Default for MemlockConfig {
    fn default() -> Self {
        MemlockConfig {
            rdma_default: "unlimited".into(),
            on_failure: "error".into(),
        }
    }
}

impl Default for RundConfig {
    fn default() -> Self {
        RundConfig {
            grace_period_seconds: 30,
            agent_path: None,
            state_dir: PathBuf::from("/run/rund"),
            cgroup: Default::default(),
            devices: Default::default(),
            checks: Default::default(),
            verify: Default::default(),
            memlock: Default::default(),
            userns: Default::default(),
            policy: Default::default(),
            init: Default::default(),
            trace: Default::default(),
            idle: Default::default(),
            shim: Default::default(),
            sandbox: Default::default(),
        }
    }
}

impl RundConfig {
    /// Loads from `explicit`, else `$RUND_CONFIG`, else the default path.
    pub fn load(explicit: Option<&Path>) -> Result<RundConfig, ConfigError> {
        let env = std::env::var_os(ENV_PATH).map(PathBuf::from);
        let path = explicit
            .map(Path::to_path_buf)
            .or(env)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH));
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
                Ok(Self::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<RundConfig, ConfigError> {
        let malformed = |reason: &dyn std::fmt::Display| ConfigError::Malformed {
            path: path.display().to_string(),
            reason: reason.to_string(),
        };
        let config: RundConfig = toml::from_str(text).map_err(|e| malformed(&e))?;
        config.userns.validate().map_err(|e| malformed(&e))?;
        config.policy.validate().map_err(|e| malformed(&e))?;
        if config.sandbox.warm > MAX_WARM {
            return Err(malformed(&format_args!(
                "[sandbox] warm = {} is over the limit of {MAX_WARM}",
                config.sandbox.warm
            )));
        }
        let pin = &config.sandbox.root_template;
        let absolute_file = pin.starts_with('/') && Path::new(pin).file_name().is_some();
        if !pin.is_empty() && !absolute_file {
            return Err(malformed(&format_args!(
                "[sandbox] root_template = {pin:?} must be an absolute file path (or \"\" for none)"
            )));
        }
        Ok(config)
    }

    /// The agent binary to start.
    pub fn agent_binary(&self) -> PathBuf {
        binary(self.agent_path.as_deref(), "rund-agent")
    }

    /// The dynamic `rund` binary: the static shim runs NVML and write_bw in it.
    pub fn helper_binary(&self) -> PathBuf {
        binary(None, "rund")
    }
}

/// `configured`, else `name` next to the running binary, else `name` on $PATH.
fn binary(configured: Option<&Path>, name: &str) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    if let Ok(exe) = std::env::current_exe() {
        let sibling = exe.with_file_name(name);
        if sibling.exists() {
            return sibling;
        }
    }
    which(name).unwrap_or_else(|| PathBuf::from(name))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = RundConfig::parse("", Path::new("x")).unwrap();
        assert_eq!(c, RundConfig::default());
        let c = RundConfig::parse("grace_period_seconds = 5\n", Path::new("x")).unwrap();
        assert_eq!(c.grace_period_seconds, 5);
    }

    #[test]
    fn malformed_and_unknown_keys_are_errors() {
        let e =
            RundConfig::parse("grace_period_seconds = \"x\"", Path::new("/c.toml")).unwrap_err();
        assert!(e.to_string().contains("/c.toml"), "{e}");
        assert!(RundConfig::parse("bogus = 1", Path::new("x")).is_err());
    }

    #[test]
    fn the_shipped_example_parses_to_the_defaults() {
        let text = include_str!("../../../deploy/config.toml");
        let c = RundConfig::parse(text, Path::new("deploy/config.toml")).unwrap();
        assert_eq!(c.userns, UsernsConfig::default());
        assert_eq!(c.memlock, MemlockConfig::default());
        assert_eq!(c.policy, PolicyConfig::default());
        assert_eq!(c.cgroup, rund_cgroup::CgroupConfig::default());
        assert_eq!(c.idle, IdleConfig::default());
        assert_eq!(c.sandbox, SandboxConfig::default());
        assert_eq!(c.grace_period_seconds, 30);
    }

    #[test]
    fn warm_sandboxes_default_to_two_and_have_a_limit() {
        assert_eq!(RundConfig::default().sandbox.warm, 2);
        assert!(RundConfig::default().sandbox.head_start);
        let c = RundConfig::parse("[sandbox]\nhead_start = false\n", Path::new("x")).unwrap();
        assert!(!c.sandbox.head_start);
        let c = RundConfig::parse("[sandbox]\nwarm = 0\n", Path::new("x")).unwrap();
        assert_eq!(c.sandbox.warm, 0);
        let e = RundConfig::parse("[sandbox]\nwarm = 65\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("over the limit of 64"), "{e}");
        assert!(RundConfig::parse("[sandbox]\nwarm = -1\n", Path::new("x")).is_err());
    }

    #[test]
    fn the_agent_root_template_is_an_absolute_file_or_none() {
        let d = RundConfig::default().sandbox;
        assert_eq!(d.root_template().as_deref(), Some(ROOT_TEMPLATE));
        let c = RundConfig::parse("[sandbox]\nroot_template = \"\"\n", Path::new("x")).unwrap();
        assert_eq!(c.sandbox.root_template(), None);
        let c =
            RundConfig::parse("[sandbox]\nroot_template = \"/run/t/a\"\n", Path::new("x")).unwrap();
        assert_eq!(c.sandbox.root_template().as_deref(), Some("/run/t/a"));
        for bad in ["run/a", "/", "/run/.."] {
            let text = format!("[sandbox]\nroot_template = {bad:?}\n");
            let e = RundConfig::parse(&text, Path::new("x")).unwrap_err();
            assert!(e.to_string().contains("absolute file path"), "{bad}: {e}");
        }
    }

    #[test]
    fn shim_mode_is_per_pod_unless_per_node() {
        assert_eq!(RundConfig::default().shim.mode, ShimMode::PerPod);
        let c = RundConfig::parse("[shim]\nmode = \"per-node\"\n", Path::new("x")).unwrap();
        assert_eq!(c.shim.mode, ShimMode::PerNode);
        let e = RundConfig::parse("[shim]\nmode = \"per-host\"\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("per-host"), "{e}");
    }

    #[test]
    fn userns_mode_replaces_enabled() {
        let c = RundConfig::parse("[userns]\nmode = \"always\"\n", Path::new("x")).unwrap();
        assert_eq!(c.userns.mode, RemapMode::Always);
        assert_eq!(RundConfig::default().userns.mode, RemapMode::Requested);
        let e = RundConfig::parse("[userns]\nenabled = true\n", Path::new("/c.toml")).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("mode = \"always\"") && e.contains("/c.toml"),
            "{e}"
        );
        let e = RundConfig::parse("[userns]\nmode = \"sometimes\"\n", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("sometimes"), "{e}");
        let c = RundConfig::parse(
            "[userns]\nprivileged_caps = [\"NET_RAW\", \"CAP_NET_ADMIN\"]\non_privileged = \"host\"\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.userns.privileged_caps.len(), 2);
        assert_eq!(c.userns.on_privileged, OnPrivileged::Host);
        assert!(RundConfig::parse(
            "[userns]\nprivileged_caps = [\"CAP_FLY\"]\n",
            Path::new("x")
        )
        .is_err());
    }

    #[test]
    fn cgroup_keys_are_checked() {
        let c = RundConfig::parse(
            "[cgroup]\npool_parents = [\"/default\", \"/k8s.io\"]\nreclaim_on_remove = true\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.cgroup.pool_parents, ["/default", "/k8s.io"]);
        assert!(c.cgroup.reclaim_on_remove);
        let bad = RundConfig::parse("[cgroup]\npool_parents = [\"/a/../b\"]\n", Path::new("x"))
            .unwrap()
            .cgroup;
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("pool_parents"), "{e}");
    }

    #[test]
    fn explicit_missing_file_is_an_error() {
        assert!(RundConfig::load(Some(Path::new("/nonexistent/rund.toml"))).is_err());
    }
}
