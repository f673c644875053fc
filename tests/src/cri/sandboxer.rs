//! A CRI containerd 2.1 (from the cache, whatever line `RUND_IT_CONTAINERD` selects: 1.6 has
//! no sandbox API) whose `rund` handler has `sandboxer = "shim"`: rund's agent is the pod
//! sandbox, with no pause container.

use super::{CriFixture, Handler};
use crate::containerd::line::{cached_dir, ContainerdBins};
use crate::containerd::ContainerdOpts;

/// The sandboxer (containerd's sandbox controller plugin) of a shim-mode pod.
pub const SHIM_SANDBOXER: &str = "shim";

/// Starts the fixture with a pod network (containerd 2.1 panics on a host-network pod with
/// `sandboxer = "shim"`) and an unpullable pause image, which proves none is needed. `None`
/// after a SKIP when 2.1 is not in the cache or rund is not built.
pub fn start_shim_mode(test: &str, rund_config: Option<String>) -> Option<CriFixture> {
    let dir = cached_dir("2.1");
    let bins = match ContainerdBins::probe(&dir) {
        Ok(b) => b,
        Err(e) => {
            crate::skip!("containerd 2.1 is not in the cache ({e}): run `make containerd-2.1`")
        }
    };
    let mut opts = ContainerdOpts::new();
    opts.containerd = Some(bins);
    opts.rund_sandboxer = Some(SHIM_SANDBOXER.into());
    opts.sandbox_image = Some("registry.invalid/rund/no-pause:none".into());
    opts.rund_config = rund_config;
    opts = opts.pod_network();
    CriFixture::start(Handler::Rund, test, opts)
}
