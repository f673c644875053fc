//! `delete`: containerd's clean-up after a shim connection closes. Idempotent:
//! unmount the rootfs and any lower layer staged for it, stop a leftover
//! agent, give back the cgroup and the user namespace lease, answer 137.
//! The rund config is the one recorded in the bundle at `start` (containerd
//! passes `delete` no runtime options), else `$RUND_CONFIG` or the default.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use super::flags::Flags;
use containerd_shim_protos::api::DeleteResponse;
use containerd_shim_protos::protobuf::Message;

use crate::clock::now_ns;
use crate::config::RundConfig;
use crate::entry::error::EntryError;
use crate::record;
use crate::task::events::timestamp_ns;

pub fn run(flags: &Flags) -> Result<(), EntryError> {
    let bundle = std::env::current_dir().map_err(EntryError::Cwd)?;
    if let Err(e) = crate::rootfs::cleanup(&bundle) {
        eprintln!("rund delete: {e}");
    }
    crate::rootfs::unstage_all(&bundle);
    record::kill_agent(&bundle);
    let config = match RundConfig::load(record::recorded_config(&bundle).as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rund delete: {e}; using the defaults");
            RundConfig::default()
        }
    };
    let id = if flags.id.is_empty() {
        bundle
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string()
    } else {
        flags.id.clone()
    };
    remove_cgroup(&bundle, &id, &config);
    release_leases(&config, &id, &bundle);
    remove_dead_socket(&bundle);
    let resp = DeleteResponse {
        pid: 0,
        exit_status: 137,
        exited_at: Some(timestamp_ns(now_ns())).into(),
        ..Default::default()
    };
    let bytes = resp.write_to_bytes().map_err(EntryError::Encode)?;
    std::io::stdout()
        .write_all(&bytes)
        .map_err(EntryError::Write)?;
    Ok(())
}

/// After a shim crash the container's cgroup outlives it: empty it and give
/// it back (recycled into the pool, or removed), and drop the temp files the
/// shim may have left mid-write in the pool's state for its parent (it may
/// die at any point of a Create, its cgroup head start included). Best
/// effort, idempotent.
fn remove_cgroup(bundle: &Path, id: &str, config: &RundConfig) {
    let Ok(spec) = crate::spec::load(bundle) else {
        return;
    };
    let path = crate::cgroups::path_for(&spec, id);
    let Ok(hier) = rund_cgroup::Hierarchy::detect_remembered(&config.cgroup.state_dir) else {
        return;
    };
    let cgroups = rund_cgroup::Cgroups::with(
        hier,
        std::sync::Arc::new(rund_cgroup::fs::RealFs),
        config.cgroup.clone(),
    );
    cgroups.sweep_crash_leftovers(&path);
    let Ok(mgr) = cgroups.load(&path) else { return };
    let _ = mgr.kill_all(nix::sys::signal::Signal::SIGKILL);
    if let Err(e) = mgr.destroy() {
        eprintln!("rund delete: cgroup {path}: {e}");
    }
}

/// A killed shim leaves its socket behind (under /run/containerd/s): remove
/// it once nobody listens. A pod's live shim still answers: it stays.
fn remove_dead_socket(bundle: &Path) {
    let Ok(address) = std::fs::read_to_string(bundle.join("address")) else {
        return;
    };
    let path = address.trim().trim_start_matches("unix://");
    if path.is_empty() || path.starts_with('@') {
        return;
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            let _ = std::fs::remove_file(path);
        }
        _ => {}
    }
}

/// Drops the leases of dead owners, this sandbox's among them once its
/// agent, which ends itself when its shim is gone, has died (bounded wait:
/// it may have been unrecorded if the shim died just after starting it).
/// An owner that began before this bundle was written is not waited for:
/// this sandbox's shim and agent start after it, so that owner is another
/// running sandbox with the same id (refused at its Create), which keeps
/// its ids.
fn release_leases(config: &RundConfig, id: &str, bundle: &Path) {
    use crate::userns::lease::{owner, Liveness, ProcLiveness};
    let Ok(store) = crate::userns::LeaseStore::in_state_dir(&config.state_dir, &config.userns)
    else {
        return;
    };
    if !store.path().exists() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut told = false;
    while Instant::now() < deadline {
        // Both ages at the same instant: an age taken once would fall
        // behind the owner's while this waits, and our own agent would
        // soon look older than the bundle.
        let age = bundle_age(bundle);
        let another_pods = |e: &crate::userns::lease::LeaseEntry| {
            age.is_some_and(|age| owner::began_before_now(&e.owner, age))
        };
        let (theirs, ours): (Vec<_>, Vec<_>) = store
            .list()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.sandbox_id == id && ProcLiveness.is_alive(&e.owner))
            .partition(|e| another_pods(e));
        if let (Some(e), false) = (theirs.first(), told) {
            eprintln!(
                "rund delete: sandbox id {id}: host ids {}..{} stay with pid {}, which began \
                 before this bundle (another running sandbox with this id); not waited for",
                e.lease.host_base,
                e.lease.host_base as u64 + e.lease.size as u64,
                e.owner.pid
            );
            told = true;
        }
        if ours.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(e) = store.reclaim() {
        eprintln!("rund delete: user namespace leases: {e}");
    }
}

/// How long ago containerd wrote this bundle's spec, which it does before
/// it starts the shim.
fn bundle_age(bundle: &Path) -> Option<Duration> {
    let written = std::fs::metadata(bundle.join("config.json"))
        .and_then(|m| m.modified())
        .ok()?;
    std::time::SystemTime::now().duration_since(written).ok()
}
