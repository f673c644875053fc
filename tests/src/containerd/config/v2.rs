//! config.toml version 2, for containerd 1.6: CRI is the one plugin `io.containerd.grpc.v1.cri`.

use std::fmt::Write as _;

use super::{header, Layout};
use crate::containerd::ContainerdOpts;
use crate::image::BUSYBOX_IMAGE;

pub(super) const CRI_PLUGIN: &str = "io.containerd.grpc.v1.cri";

pub(super) fn render(l: &Layout, opts: &ContainerdOpts) -> String {
    let extra: &[&str] = if opts.cri { &[] } else { &[CRI_PLUGIN] };
    let mut s = header(2, l, opts, extra);
    if opts.cri {
        render_cri(&mut s, l, opts);
    }
    s
}

fn render_cri(s: &mut String, l: &Layout, opts: &ContainerdOpts) {
    let cri = format!("plugins.{CRI_PLUGIN:?}");
    // restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, so lowering oom_score_adj to
    // the sandbox's -998 fails for every runtime. Tests only: production configs leave it off.
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

[{cri}.registry]
  config_path = {certs:?}

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "{default_rt}"
"#,
        sandbox = opts.sandbox_image.as_deref().unwrap_or(BUSYBOX_IMAGE),
        certs = l.certs_d.display().to_string(),
        default_rt = if runc_runtime(opts) { "runc" } else { "rund" },
    );
    if opts.rund_runtime {
        // Every annotation: the suites test rund's own handling of each.
        // filepath.Match: "*" stops at "/", so "*/*" covers rund.io/... and cdi.k8s.io/...
        let _ = write!(
            s,
            "\n[{cri}.containerd.runtimes.rund]\n  runtime_type = \"io.containerd.rund.v2\"\n  \
             pod_annotations = [\"*\", \"*/*\"]\n  container_annotations = [\"*\", \"*/*\"]\n"
        );
    }
    if let Some(cfg) = opts.rund_config_path.as_ref().filter(|_| opts.rund_runtime) {
        let _ = write!(
            s,
            "\n[{cri}.containerd.runtimes.rund.options]\n  ConfigPath = {:?}\n",
            cfg.display().to_string()
        );
    }
    if runc_runtime(opts) {
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

/// A `runc` handler (the default) with `with_runc`, and in a user's config without rund.
fn runc_runtime(opts: &ContainerdOpts) -> bool {
    opts.with_runc || !opts.rund_runtime
}
