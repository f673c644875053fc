//! Direct (containerd-less) tests of the shim binary.
//!
//! - [`FakeEvents`]: a fake containerd events endpoint (ttrpc `Events` Forward)
//!   that records every event in order, decoded.
//! - [`ShimServer`]: the shim run in serve mode in a bundle, with `TTRPC_ADDRESS` pointing at
//!   the fake, and a connected Task client; [`run_action`] for one-shot actions (`delete`).
//! - [`Bundle`]: a scratch dir with the bundle, a `ctr run --rootfs`-shaped spec with a unique
//!   cgroups path.
//! - [`residue`]: cgroup dirs, rund-agent children and mounts a container left behind.
//! - [`Direct`]: all of it for one container, torn down in the right order.

pub mod bundle;
pub mod error;
pub mod events;
pub mod flow;
pub mod memory;
pub mod residue;
pub mod server;
mod state;

use containerd_shim_protos::api::{CreateTaskRequest, ExecProcessRequest};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::ttrpc;
use containerd_shim_protos::ttrpc::Code;
use serde_json::Value;

/// Config TOML that remaps only sandboxes that ask (rund's default, written out).
pub const USERNS_OFF: &str = "[userns]\nmode = \"requested\"\n";
/// Config that remaps every sandbox.
pub const USERNS_ALWAYS: &str = "[userns]\nmode = \"always\"\n";

pub use bundle::{
    cgroup_parent, default_spec, exec_process, unique_id, Bundle, DIRECT_BASE, NAMESPACE,
};
pub use error::{Result, ShimHarnessError};
pub use events::{topics, FakeEvents, Recorded, TaskEvent};
pub use flow::EVENT_GUARD;
pub use residue::{residue, settle, Residue};
pub use server::{
    ctx, run_action, run_action_env, running, ActionOutput, Ended, ShimServer, HANG_GUARD,
};
pub use state::{process_config, process_config_with};

use crate::bins::RundBins;

/// The type containerd gives an exec's process spec.
pub const PROCESS_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";

/// One container's direct shim: the bundle, the fake events endpoint and the shim serving it.
/// Fields drop in order: the shim (killed if still alive, leftovers unmounted), the events
/// server, then the scratch dir.
pub struct Direct {
    pub shim: ShimServer,
    pub events: FakeEvents,
    pub bundle: Bundle,
}

impl Direct {
    /// Starts a fake events server and the shim for `bundle` (its config.json may be written
    /// before or after).
    pub async fn start(bins: &RundBins, bundle: Bundle) -> Result<Direct> {
        Self::start_with(bins, bundle, "").await
    }

    /// Like [`Direct::start`], with `extra_config` (TOML) appended to the shim's rund config.
    pub async fn start_with(bins: &RundBins, bundle: Bundle, extra_config: &str) -> Result<Direct> {
        let events = FakeEvents::start(&bundle.scratch().join("events.sock")).await?;
        let shim = ShimServer::start_with(bins, &bundle, &events, extra_config).await?;
        Ok(Direct {
            shim,
            events,
            bundle,
        })
    }

    /// Like [`Direct::start_with`], through the `start` action as containerd runs the shim:
    /// the server is `start`'s fork, with the head starts `start` gives it.
    pub async fn start_forked(
        bins: &RundBins,
        bundle: Bundle,
        extra_config: &str,
    ) -> Result<Direct> {
        let events = FakeEvents::start(&bundle.scratch().join("events.sock")).await?;
        let shim = ShimServer::start_forked(bins, &bundle, &events, extra_config).await?;
        Ok(Direct {
            shim,
            events,
            bundle,
        })
    }

    /// A Create request for this bundle's container: no rootfs mounts, empty stdio paths.
    pub fn create_request(&self) -> CreateTaskRequest {
        create_request(&self.bundle)
    }

    /// The shim's log and stderr, for failure messages.
    pub fn diagnostics(&self) -> String {
        format!(
            "--- shim log ---\n{}\n--- shim stderr ---\n{}",
            self.bundle.log(),
            self.shim.stderr()
        )
    }

    /// Shutdown, then the events server; the scratch dir goes when `self.bundle` drops.
    pub async fn finish(self) -> Ended {
        let Direct {
            shim,
            events,
            bundle,
        } = self;
        let ended = shim.shutdown().await;
        events.stop().await;
        drop(bundle);
        ended
    }
}

/// A Create request for `bundle`'s container: no rootfs mounts, empty stdio paths.
pub fn create_request(bundle: &Bundle) -> CreateTaskRequest {
    CreateTaskRequest {
        id: bundle.id.clone(),
        bundle: bundle.path.display().to_string(),
        terminal: false,
        ..Default::default()
    }
}

/// An Exec request running `process` (an OCI Process as JSON) with empty stdio paths.
pub fn exec_request(id: &str, exec_id: &str, process: &Value) -> ExecProcessRequest {
    ExecProcessRequest {
        id: id.to_string(),
        exec_id: exec_id.to_string(),
        terminal: false,
        spec: Some(Any {
            type_url: PROCESS_TYPE_URL.to_string(),
            value: serde_json::to_vec(process).expect("a Value serializes"),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

/// The status code and message of a failed call, if the shim answered with a status.
pub fn status_of(e: &ttrpc::Error) -> Option<(Code, String)> {
    match e {
        ttrpc::Error::RpcStatus(s) => Some((s.code(), s.message.clone())),
        _ => None,
    }
}

/// The bins for a direct-shim test, or a skip (with a message) when not root or not built.
pub fn direct_setup(test: &str) -> Option<RundBins> {
    if !nix::unistd::geteuid().is_root() {
        crate::skip!("{test}: needs root (namespaces, mounts, cgroups)");
    }
    crate::rund_bins_or_skip(test)
}

/// The shared busybox rootfs, built under a lock: two first callers at once would both
/// symlink the applets (EEXIST).
pub fn busybox_rootfs() -> &'static std::path::Path {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    crate::shared_busybox_rootfs().expect("busybox rootfs (busybox-static)")
}
