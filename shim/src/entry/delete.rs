//! `delete`: containerd's clean-up after a shim connection closes. Idempotent:
//! unmount the rootfs, stop a leftover agent, answer 137.

use std::io::Write;

use containerd_shim::Flags;
use containerd_shim_protos::api::DeleteResponse;
use containerd_shim_protos::protobuf::Message;

use crate::task::events::{now_ns, timestamp_ns};

pub fn run(_flags: &Flags) -> Result<(), String> {
    let bundle = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    if let Err(e) = crate::rootfs::cleanup(&bundle) {
        eprintln!("rund delete: {e}");
    }
    crate::entry::serve::kill_recorded_agent(&bundle);
    remove_cgroup(&bundle);
    let resp = DeleteResponse {
        pid: 0,
        exit_status: 137,
        exited_at: Some(timestamp_ns(now_ns())).into(),
        ..Default::default()
    };
    let bytes = resp.write_to_bytes().map_err(|e| format!("encode: {e}"))?;
    std::io::stdout()
        .write_all(&bytes)
        .map_err(|e| format!("write: {e}"))?;
    Ok(())
}

/// After a shim crash the container's cgroup outlives it: empty it and give
/// it back (recycled into the pool, or removed). Best effort, idempotent.
fn remove_cgroup(bundle: &std::path::Path) {
    let Ok(spec) = crate::spec::load(bundle) else {
        return;
    };
    let id = bundle
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let path = crate::cgroups::path_for(&spec, &id);
    let cfg = crate::config::RundConfig::load(None)
        .map(|c| c.cgroup)
        .unwrap_or_default();
    let Ok(hier) = rund_cgroup::Hierarchy::detect() else {
        return;
    };
    let cgroups =
        rund_cgroup::Cgroups::with(hier, std::sync::Arc::new(rund_cgroup::fs::RealFs), cfg);
    let Ok(mgr) = cgroups.load(&path) else { return };
    let _ = mgr.kill_all(nix::sys::signal::Signal::SIGKILL);
    if let Err(e) = mgr.destroy() {
        eprintln!("rund delete: cgroup {path}: {e}");
    }
}
