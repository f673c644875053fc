//! The private containerd's config.toml: version 2 for containerd 1.6 ([`v2`]), version 3 for
//! containerd 2.x ([`v3`]). Both render the same instance: private root, state, sockets and opt
//! dir; CRI (when asked) with a local sandbox image, handler `rund` (and `runc`), host-network
//! pods and a registry config that sends every pull to a closed local port.

mod v2;
mod v3;

use std::path::{Path, PathBuf};

use super::line::ContainerdBins;
use super::ContainerdOpts;

/// Paths one containerd instance uses, all under its temp dir.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: PathBuf,
    pub state: PathBuf,
    pub grpc: PathBuf,
    pub ttrpc: PathBuf,
    pub opt: PathBuf,
    pub cni_conf: PathBuf,
    /// CRI's registry `config_path`: `_default/hosts.toml` points every registry at
    /// [`OFFLINE_REGISTRY`], so a pull fails at once and nothing leaves the machine.
    pub certs_d: PathBuf,
}

/// Nothing listens on the discard port: a pull is refused without a DNS lookup.
pub const OFFLINE_REGISTRY: &str = "http://127.0.0.1:9";

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        Layout {
            root: dir.join("root"),
            state: dir.join("state"),
            grpc: dir.join("c.sock"),
            ttrpc: dir.join("c.sock.ttrpc"),
            opt: dir.join("opt"),
            cni_conf: dir.join("cni"),
            certs_d: dir.join("certs.d"),
        }
    }

    /// The `hosts.toml` that applies to every registry without its own dir.
    pub fn default_hosts_toml(&self) -> PathBuf {
        self.certs_d.join("_default/hosts.toml")
    }

    /// Create the dirs and the offline `hosts.toml`.
    pub fn create(&self) -> std::io::Result<()> {
        for d in [&self.root, &self.state, &self.cni_conf] {
            std::fs::create_dir_all(d)?;
        }
        let hosts = self.default_hosts_toml();
        if let Some(d) = hosts.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(hosts, hosts_toml())
    }
}

/// The `_default/hosts.toml` body.
pub fn hosts_toml() -> String {
    format!(
        "# Tests never pull: every registry resolves to a closed local port.\nserver = {OFFLINE_REGISTRY:?}\n"
    )
}

/// Plugins that cannot work here or only add noise to the log, on both lines.
const ALWAYS_DISABLED: &[&str] = &[
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
];

/// Render config.toml for the containerd in `bins`. TOML strings are written with `{:?}`, a
/// valid TOML basic string for the plain ASCII paths used here.
pub fn render(l: &Layout, opts: &ContainerdOpts, bins: &ContainerdBins) -> String {
    let version = opts
        .config_version
        .unwrap_or(if bins.is_v2() { 3 } else { 2 });
    let mut s = if version >= 3 {
        v3::render(l, opts)
    } else {
        v2::render(l, opts)
    };
    s.push_str(&opts.extra_config);
    s
}

/// `disabled_plugins = [...]` items.
fn disabled_list(extra: &[&str]) -> String {
    ALWAYS_DISABLED
        .iter()
        .chain(extra)
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The top of the file: identical on both lines except for the version.
fn header(version: u32, l: &Layout, opts: &ContainerdOpts, extra_disabled: &[&str]) -> String {
    // containerd 2.x logs "event forwarded" (an event a shim published) only at trace, and
    // tests read it to tell the shim's events from containerd's own.
    let level = match (opts.debug, version) {
        (false, _) => "info",
        (true, 2) => "debug",
        (true, _) => "trace",
    };
    format!(
        r#"version = {version}
root = {root:?}
state = {state:?}
disabled_plugins = [{disabled}]

[grpc]
  address = {grpc:?}

[ttrpc]
  address = {ttrpc:?}

[debug]
  level = "{level}"

[plugins."io.containerd.internal.v1.opt"]
  path = {opt:?}
"#,
        disabled = disabled_list(extra_disabled),
        root = l.root.display().to_string(),
        state = l.state.display().to_string(),
        grpc = l.grpc.display().to_string(),
        ttrpc = l.ttrpc.display().to_string(),
        opt = l.opt.display().to_string(),
    )
}

#[cfg(test)]
mod tests;
