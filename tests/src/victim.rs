//! A detached rund container to probe from outside: the pids of the agent and the shim that
//! serve it, and its removal.

use std::path::Path;
use std::time::Duration;

use crate::ocispec::parent_pid;
use crate::{Containerd, RUND_RUNTIME};

/// The container's id.
pub const ID: &str = "victim";
const GRACE: Duration = Duration::from_secs(15);

/// Runs `sleep 1000` detached as [`ID`] through rund; returns (agent pid, shim pid).
pub fn start(ctd: &Containerd, rootfs: &Path) -> (u32, u32) {
    ctd.run_detached(ID, rootfs, &["sleep", "1000"], RUND_RUNTIME)
        .unwrap();
    ctd.wait_for_status(ID, "RUNNING", GRACE).unwrap();
    let task = ctd
        .task_list()
        .unwrap()
        .into_iter()
        .find(|t| t.id == ID)
        .unwrap()
        .pid;
    let agent = parent_pid(task).unwrap();
    (agent, parent_pid(agent).unwrap())
}

/// Kills and deletes it.
pub fn remove(ctd: &Containerd) {
    ctd.task_kill(ID, "SIGKILL", false).unwrap();
    ctd.wait_for_status(ID, "STOPPED", GRACE).unwrap();
    ctd.task_delete(ID, false).unwrap().check().unwrap();
    ctd.container_delete(ID).unwrap().check().unwrap();
}
