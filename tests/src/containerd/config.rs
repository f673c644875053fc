//! The private containerd's config.toml (version 2).

use std::fmt::Write as _;
use std::path::Path;

use super::ContainerdOpts;
use crate::image::BUSYBOX_IMAGE;

/// Paths one containerd instance uses, all under its temp dir.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: std::path::PathBuf,
    pub state: std::path::PathBuf,
    pub grpc: std::path::PathBuf,
    pub ttrpc: std::path::PathBuf,
    pub opt: std::path::PathBuf,
    pub cni_conf: std::path::PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        Layout {
            root: dir.join("root"),
            state: dir.join("state"),
            grpc: dir.join("c.sock"),
            ttrpc: dir.join("c.sock.ttrpc"),
            opt: dir.join("opt"),
            cni_conf: dir.join("cni"),
        }
    }
}

/// Plugins that cannot work here or only add noise to the log.
const ALWAYS_DISABLED: &[&str] = &[
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
];

const CRI_PLUGIN: &str = "io.containerd.grpc.v1.cri";

/// Render config.toml. TOML strings are written with `{:?}`, which is a valid TOML basic string
/// for the plain ASCII paths used here.
pub fn render(l: &Layout, opts: &ContainerdOpts) -> String {
    let mut disabled: Vec<&str> = ALWAYS_DISABLED.to_vec();
    if !opts.cri {
        disabled.push(CRI_PLUGIN);
    }
    let disabled = disabled
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let level = if opts.debug { "debug" } else { "info" };
    let mut s = format!(
        r#"version = 2
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
        root = l.root.display().to_string(),
        state = l.state.display().to_string(),
        grpc = l.grpc.display().to_string(),
        ttrpc = l.ttrpc.display().to_string(),
        opt = l.opt.display().to_string(),
    );
    if opts.cri {
        render_cri(&mut s, l, opts);
    }
    s.push_str(&opts.extra_config);
    s
}

fn render_cri(s: &mut String, l: &Layout, opts: &ContainerdOpts) {
    let cri = format!("plugins.{CRI_PLUGIN:?}");
    // stream_server_port 0: parallel instances must not fight over the default 10010.
    let _ = write!(
        s,
        r#"
[{cri}]
  sandbox_image = {sandbox:?}
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "{default_rt}"

[{cri}.containerd.runtimes.rund]
  runtime_type = "io.containerd.rund.v2"
  pod_annotations = ["*", "rund.io/*"]
"#,
        sandbox = opts.sandbox_image.as_deref().unwrap_or(BUSYBOX_IMAGE),
        default_rt = if opts.with_runc { "runc" } else { "rund" },
    );
    if let Some(cfg) = &opts.rund_config_path {
        let _ = write!(
            s,
            "\n[{cri}.containerd.runtimes.rund.options]\n  ConfigPath = {:?}\n",
            cfg.display().to_string()
        );
    }
    if opts.with_runc {
        let _ = write!(
            s,
            r#"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"#
        );
    }
    // A private, empty CNI conf dir: pods use host network; no system CNI config is picked up.
    let _ = write!(
        s,
        r#"
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = {conf:?}
"#,
        conf = l.cni_conf.display().to_string(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_is_disabled_unless_asked() {
        let l = Layout::new(Path::new("/tmp/x"));
        let disabled = |cfg: &str| -> Vec<String> {
            let v: toml::Value = toml::from_str(cfg).unwrap();
            v["disabled_plugins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect()
        };
        let plain = render(&l, &ContainerdOpts::new());
        assert!(disabled(&plain).contains(&CRI_PLUGIN.to_owned()), "{plain}");
        assert!(!plain.contains("runtimes.rund"), "{plain}");
        assert!(plain.contains("address = \"/tmp/x/c.sock\""), "{plain}");

        let cri = render(&l, &ContainerdOpts::new().cri());
        assert!(!disabled(&cri).contains(&CRI_PLUGIN.to_owned()), "{cri}");
        assert!(cri.contains("restrict_oom_score_adj = true"), "{cri}");
        assert!(
            cri.contains("runtime_type = \"io.containerd.rund.v2\""),
            "{cri}"
        );
        assert!(
            !cri.contains("runtimes.runc]"),
            "runc only with with_runc: {cri}"
        );
        let both = render(&l, &ContainerdOpts::new().cri().with_runc());
        assert!(both.contains("runtimes.runc]"), "{both}");
    }

    #[test]
    fn config_is_valid_toml() {
        let l = Layout::new(Path::new("/tmp/x"));
        let mut o = ContainerdOpts::new().cri().with_runc();
        o.rund_config_path = Some("/etc/rund.toml".into());
        let v: toml::Value = toml::from_str(&render(&l, &o)).unwrap();
        let rund = &v["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["rund"];
        assert_eq!(
            rund["options"]["ConfigPath"].as_str(),
            Some("/etc/rund.toml")
        );
        assert_eq!(v["version"].as_integer(), Some(2));
    }
}
