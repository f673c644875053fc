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
