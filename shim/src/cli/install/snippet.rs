//! The containerd config that registers rund as a CRI runtime handler, for both config
//! versions. `rund install` writes it and `deploy/containerd-rund*.toml` are its output for the
//! default paths (a test keeps them equal).

use std::path::{Path, PathBuf};

/// The CRI runtime handler name (RuntimeClass `handler: rund`).
pub const RUNTIME: &str = "rund";
pub const RUNTIME_TYPE: &str = "io.containerd.rund.v2";
pub const SHIM_BIN: &str = "containerd-shim-rund-v2";
/// Pod annotations CRI passes to rund: only those that cannot widen a pod's privileges.
/// Devices, memlock and userns binds are privileged requests and never come from a pod.
pub const POD_ANNOTATIONS: &[&str] = &[
    rund_annotations::INIT,
    rund_annotations::GRACE_PERIOD,
    rund_annotations::USERNS,
];
/// Container annotations CRI passes: CDI device names, which the kubelet sets from a device
/// plugin's allocation (a pod cannot set container annotations itself).
pub const CONTAINER_ANNOTATIONS: &[&str] = &["cdi.k8s.io/*"];

/// containerd 1.x's CRI plugin; in 2.x still read (and migrated) from version 2 configs.
pub const CRI_V2: &str = "io.containerd.grpc.v1.cri";
/// containerd 2.x's CRI runtime plugin (config version 3).
pub const CRI_V3: &str = "io.containerd.cri.v1.runtime";

/// The paths the registration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `runtime_path`: the installed shim, so containerd needs no PATH change.
    pub shim: PathBuf,
    /// rund's config; named in `options.ConfigPath` on containerd 1.x when not the default.
    pub rund_config: PathBuf,
}

impl Paths {
    pub fn new(prefix: &Path, rund_config: &Path) -> Paths {
        Paths {
            shim: prefix.join("bin").join(SHIM_BIN),
            rund_config: rund_config.to_path_buf(),
        }
    }
}

impl Paths {
    /// The config path containerd must pass rund, when it is not the one rund reads anyway.
    pub fn custom_config(&self) -> Option<&Path> {
        (self.rund_config != Path::new(crate::config::DEFAULT_PATH)).then_some(&self.rund_config)
    }
}

impl Default for Paths {
    fn default() -> Paths {
        Paths::new(
            Path::new("/usr/local"),
            Path::new(crate::config::DEFAULT_PATH),
        )
    }
}

/// A TOML basic string.
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn list(items: &[&str]) -> String {
    let v: Vec<String> = items.iter().map(|s| q(s)).collect();
    format!("[{}]", v.join(", "))
}

/// `options` puts `ConfigPath` in the runtime's options (containerd 1.x only: 2.1-2.3 read a
/// runtime's options as runc's for a user-namespaced pod and fail it).
fn runtime_body(p: &Paths, table: &str, sandboxer: bool, options: bool) -> String {
    let mut s = format!(
        "[{table}]\n  runtime_type = {rt}\n  runtime_path = {path}\n",
        rt = q(RUNTIME_TYPE),
        path = q(&p.shim.display().to_string()),
    );
    if sandboxer {
        s.push_str("  sandboxer = \"podsandbox\"\n");
    }
    s.push_str(&format!(
        "  # Only annotations that cannot widen a pod's privileges: devices, memlock and\n  \
         # userns binds are never taken from a pod.\n  pod_annotations = {pod}\n  \
         # CDI device names, set by the kubelet from a device plugin's allocation.\n  \
         container_annotations = {ctr}\n",
        pod = list(POD_ANNOTATIONS),
        ctr = list(CONTAINER_ANNOTATIONS),
    ));
    match p.custom_config() {
        Some(cfg) if options => s.push_str(&format!(
            "\n[{table}.options]\n  ConfigPath = {}\n",
            q(&cfg.display().to_string())
        )),
        Some(cfg) => s.push_str(&format!(
            "  # containerd 2.x passes no runtime options (2.1-2.3 read them as runc's for\n  \
             # user-namespaced pods): set this in containerd's environment for rund's config:\n  \
             # RUND_CONFIG={}\n",
            cfg.display()
        )),
        None => {}
    }
    s
}

fn v2_table_name() -> String {
    format!("plugins.{}.containerd.runtimes.{RUNTIME}", q(CRI_V2))
}

/// The runtime tables in config version 2 (no `version` line): what `rund install` appends to
/// a containerd 1.x config.
pub fn v2_tables(p: &Paths) -> String {
    runtime_body(p, &v2_table_name(), false, true)
}

/// A complete version 2 file without runtime options. containerd 1.6/1.7 replace a whole
/// plugin section with an imported file's, so on 1.x these tables belong in config.toml itself
/// (`rund install` uses [`v2_tables`] there); on 2.x it is the drop-in for a version 2
/// config.toml (Debian's default).
pub fn v2_file(p: &Paths) -> String {
    format!(
        "# rund as CRI runtime handler `rund`, containerd config version 2.\n\
         # containerd 1.6/1.7: merge into /etc/containerd/config.toml (an imported file would\n\
         # replace the whole CRI section). containerd 2.x with a version 2 config.toml: a\n\
         # drop-in under its `imports`. `rund install` does either, with a backup.\n\
         version = 2\n\n{}",
        runtime_body(p, &v2_table_name(), false, false)
    )
}

/// The containerd 2.x drop-in for a version 3 config.toml (`/etc/containerd/conf.d/rund.toml`).
/// containerd merges imports before it migrates, so a drop-in must use config.toml's version.
pub fn v3_file(p: &Paths) -> String {
    let table = format!("plugins.{}.containerd.runtimes.{RUNTIME}", q(CRI_V3));
    format!(
        "# rund as CRI runtime handler `rund`, containerd 2.x config version 3: a drop-in under\n\
         # config.toml's `imports` (default /etc/containerd/conf.d/*.toml). Use\n\
         # containerd-rund.toml instead when config.toml says `version = 2`.\n\
         version = 3\n\n{}\n{}",
        runtime_body(p, &table, true, false),
        shim_sandboxer_example(p)
    )
}

/// A commented second handler for containerd's sandbox API (no pause container: rund's agent
/// is the pod sandbox), with the containerd releases' limits that decide its shape.
fn shim_sandboxer_example(p: &Paths) -> String {
    let table = format!(
        "plugins.{}.containerd.runtimes.{RUNTIME}-sandbox",
        q(CRI_V3)
    );
    format!(
        "# Optional: handler `rund-sandbox` through containerd's sandbox API (sandboxer = \"shim\").\n\
         # No options table: containerd 2.1-2.3 read a shim sandboxer's options as runc's and fail\n\
         # every task (fixed in 2.4); rund then reads /etc/rund/config.toml, or $RUND_CONFIG from\n\
         # containerd's environment. hostNetwork pods need containerd 2.3 or later.\n\
         # [{table}]\n\
         #   runtime_type = {rt}\n\
         #   runtime_path = {path}\n\
         #   sandboxer = \"shim\"\n\
         #   pod_annotations = {pod}\n\
         #   container_annotations = {ctr}\n",
        rt = q(RUNTIME_TYPE),
        path = q(&p.shim.display().to_string()),
        pod = list(POD_ANNOTATIONS),
        ctr = list(CONTAINER_ANNOTATIONS),
    )
}

/// The drop-in for a config.toml of `version` (2 or 3).
pub fn drop_in(p: &Paths, version: i64) -> String {
    if version >= 3 {
        v3_file(p)
    } else {
        v2_file(p)
    }
}
