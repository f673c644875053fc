//! config.toml version 3, for containerd 2.x: CRI is split into `io.containerd.cri.v1.images`
//! (pinned sandbox image, registry), `io.containerd.cri.v1.runtime` (runtimes, CNI) and the
//! `io.containerd.grpc.v1.cri` service (stream server).

use std::fmt::Write as _;

use super::{header, Layout};
use crate::containerd::ContainerdOpts;
use crate::image::BUSYBOX_IMAGE;

pub(super) const CRI_SERVICE: &str = "io.containerd.grpc.v1.cri";
pub(super) const CRI_RUNTIME: &str = "io.containerd.cri.v1.runtime";
pub(super) const CRI_IMAGES: &str = "io.containerd.cri.v1.images";
/// Every containerd 2.x listens on `/var/run/nri/nri.sock` unless NRI is off: parallel
/// instances would share it.
const NRI: &str = "io.containerd.nri.v1.nri";

pub(super) fn render(l: &Layout, opts: &ContainerdOpts) -> String {
    let extra: &[&str] = if opts.cri {
        &[NRI]
    } else {
        &[NRI, CRI_SERVICE, CRI_RUNTIME, CRI_IMAGES]
    };
    let mut s = header(3, l, opts, extra);
    if opts.cri {
        render_cri(&mut s, l, opts);
    }
    s
}

fn render_cri(s: &mut String, l: &Layout, opts: &ContainerdOpts) {
    let images = format!("plugins.{CRI_IMAGES:?}");
    let runtime = format!("plugins.{CRI_RUNTIME:?}");
    let service = format!("plugins.{CRI_SERVICE:?}");
    // restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, so lowering oom_score_adj to
    // the sandbox's -998 fails for every runtime. Tests only: production configs leave it off.
    // stream_server_port 0: parallel instances must not fight over the default 10010.
    let _ = write!(
        s,
        r#"
[{images}]
  snapshotter = "overlayfs"

[{images}.pinned_images]
  sandbox = {sandbox:?}

[{images}.registry]
  config_path = {certs:?}

[{runtime}]
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = {cdi_dirs:?}

[{runtime}.containerd]
  default_runtime_name = "{default_rt}"
"#,
        sandbox = opts.sandbox_image.as_deref().unwrap_or(BUSYBOX_IMAGE),
        certs = l.certs_d.display().to_string(),
        default_rt = if runc_runtime(opts) { "runc" } else { "rund" },
        cdi_dirs = opts
            .cdi_spec_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>(),
    );
    if opts.rund_runtime {
        // Every annotation: the suites test rund's own handling of each.
        let _ = write!(
            s,
            "\n[{runtime}.containerd.runtimes.rund]\n  runtime_type = \"io.containerd.rund.v2\"\n  \
             sandboxer = {:?}\n  pod_annotations = [\"*\", \"*/*\"]\n  \
             container_annotations = [\"*\", \"*/*\"]\n",
            opts.rund_sandboxer.as_deref().unwrap_or("podsandbox")
        );
    }
    // containerd < 2.4 fails every task of a shim sandbox whose runtime has options, and 2.x
    // every hostUsers: false container (it reads them as runc's): the shim then takes its
    // config from RUND_CONFIG (see `spawn`).
    if let Some(cfg) = opts
        .rund_config_path
        .as_ref()
        .filter(|_| opts.rund_runtime && !opts.rund_config_by_env())
    {
        let _ = write!(
            s,
            "\n[{runtime}.containerd.runtimes.rund.options]\n  ConfigPath = {:?}\n",
            cfg.display().to_string()
        );
    }
    if runc_runtime(opts) {
        let _ = write!(
            s,
            r#"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  sandboxer = "podsandbox"
"#
        );
    }
    // A private, empty CNI conf dir: pods use host network; no system CNI config is picked up.
    let _ = write!(
        s,
        r#"
[{runtime}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = {conf:?}

[{service}]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        conf = l.cni_conf.display().to_string(),
    );
}

/// A `runc` handler (the default) with `with_runc`, and in a user's config without rund.
fn runc_runtime(opts: &ContainerdOpts) -> bool {
    opts.with_runc || !opts.rund_runtime
}
