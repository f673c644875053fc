//! User namespaces at Create: the sandbox's id range (leased, or from the
//! spec), and the host-side mount trees remapped for it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use containerd_shim_protos::types::mount::Mount;
use oci_spec::runtime::{MountBuilder, Spec};

use super::Service;
use crate::error::{Result, ShimError};
use crate::rootfs;
use crate::sandbox::handle::UsernsInfo;
use crate::sandbox::idmap::IdMapping;
use crate::sandbox::Sandbox;
use crate::userns::{self, BindsMode, LeaseStore, UsernsMode};

/// Maps and bookkeeping for a new sandbox's user namespace.
pub struct Plan {
    pub uid_map: Vec<IdMapping>,
    pub gid_map: Vec<IdMapping>,
    pub info: UsernsInfo,
}

/// Decides whether the new sandbox gets a user namespace, and leases its
/// range. `None` = no user namespace.
pub async fn plan(svc: &Service, spec: &Spec, sandbox_id: &str) -> Result<Option<Plan>> {
    let config = svc.config();
    let decision = userns::decide(spec, &config.userns)?;
    match decision.mode {
        UsernsMode::Off => Ok(None),
        UsernsMode::FromSpec { uid, gid } => {
            let host_root = uid
                .iter()
                .find(|m| m.container_id == 0)
                .map(|m| m.host_id)
                .unwrap_or(0);
            // Recorded in the lease file, so the pool never hands these ids
            // to another sandbox while this one runs.
            let ranges: Vec<(u32, u32)> = uid
                .iter()
                .chain(&gid)
                .map(|m| (m.host_id, m.size))
                .collect();
            let (store, recorded) = in_blocking(
                svc,
                move |store, id| store.reserve(&id, std::process::id() as i32, &ranges),
                sandbox_id,
            )
            .await?;
            Ok(Some(Plan {
                uid_map: uid,
                gid_map: gid,
                info: UsernsInfo {
                    host_root,
                    lease: (recorded > 0).then_some(store),
                },
            }))
        }
        UsernsMode::Allocate => {
            let (store, lease) = in_blocking(
                svc,
                |store, id| store.allocate(&id, std::process::id() as i32),
                sandbox_id,
            )
            .await?;
            let map = userns::lease_map(&lease);
            Ok(Some(Plan {
                uid_map: map.clone(),
                gid_map: map,
                info: UsernsInfo {
                    host_root: lease.host_base,
                    lease: Some(store),
                },
            }))
        }
    }
}

/// Runs `f` on the node's lease store off the async threads.
async fn in_blocking<F, T>(svc: &Service, f: F, sandbox_id: &str) -> Result<(LeaseStore, T)>
where
    F: FnOnce(&LeaseStore, String) -> std::result::Result<T, userns::UsernsError> + Send + 'static,
    T: Send + 'static,
{
    let config = svc.config();
    let id = sandbox_id.to_string();
    tokio::task::spawn_blocking(move || {
        let store = LeaseStore::in_state_dir(&config.state_dir, &config.userns)?;
        let got = f(&store, id)?;
        Ok::<_, userns::UsernsError>((store, got))
    })
    .await
    .map_err(|e| ShimError::Internal(e.to_string()))?
    .map_err(ShimError::from)
}

/// How bind sources are mounted for this container.
pub fn binds_mode(spec: &Spec, svc: &Service) -> Result<BindsMode> {
    Ok(userns::decide(spec, &svc.config().userns)?.binds)
}

/// The rootfs as a detached tree: idmapped for the sandbox's user namespace
/// when it has one. Returns (tree, we mounted `<bundle>/rootfs`).
pub fn rootfs_tree(
    bundle: &Path,
    mounts: &[Mount],
    spec_root: &Path,
    sandbox: &Sandbox,
) -> Result<(OwnedFd, bool)> {
    let Some(info) = &sandbox.userns_info else {
        let (root, mounted) = rootfs::prepare(bundle, mounts, spec_root)?;
        return match rootfs::open_tree_clone(&root, true) {
            Ok(t) => Ok((t, mounted)),
            Err(e) => {
                if mounted {
                    let _ = rootfs::cleanup(bundle);
                }
                Err(e.into())
            }
        };
    };
    let ns = userns::userns_of_pid(sandbox.pid())?;
    if rootfs::idmapped::is_overlay(mounts) {
        let root = rootfs::idmapped::overlay(bundle, &mounts[0], ns.as_fd(), info.host_root)?;
        return match rootfs::open_tree_clone(&root, true) {
            Ok(t) => Ok((t, true)),
            Err(e) => {
                let _ = rootfs::cleanup(bundle);
                Err(e.into())
            }
        };
    }
    let (root, mounted) = rootfs::prepare(bundle, mounts, spec_root)?;
    match userns::idmapped_clone(&root, true, ns.as_fd()) {
        Ok(t) => Ok((t, mounted)),
        Err(e) => {
            if mounted {
                let _ = rootfs::cleanup(bundle);
            }
            Err(e.into())
        }
    }
}

/// A bind source as a detached tree (idmapped unless binds are "plain").
pub fn bind_tree(
    src: &Path,
    recursive: bool,
    sandbox: &Sandbox,
    mode: BindsMode,
) -> Result<OwnedFd> {
    if sandbox.userns_info.is_some() && mode == BindsMode::Idmap {
        let ns = userns::userns_of_pid(sandbox.pid())?;
        return Ok(userns::idmapped_clone(src, recursive, ns.as_fd())?);
    }
    Ok(rootfs::open_tree_clone(src, recursive)?)
}

/// Under a user namespace that does not own the network namespace, the
/// kernel refuses a sysfs mount: bind the host's /sys read-only instead
/// (what runc does). Returns the indices of the mounts it replaced: they are
/// bound plainly, as sysfs cannot be idmapped.
pub fn sysfs_to_bind(spec: &mut Spec, sandbox: &Sandbox) -> Vec<usize> {
    let mut replaced = Vec::new();
    if sandbox.userns_info.is_none() {
        return replaced;
    }
    let Some(mounts) = spec.mounts().clone() else {
        return replaced;
    };
    let mounts = mounts
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            // (cgroup mounts became binds of the container's own cgroup.)
            let source = match m.typ().as_deref() {
                Some("sysfs") if !sandbox.owns_net => "/sys",
                _ => return m,
            };
            replaced.push(i);
            let opts = ["rbind", "ro", "nosuid", "nodev", "noexec"];
            MountBuilder::default()
                .destination(m.destination().clone())
                .typ("bind")
                .source(PathBuf::from(source))
                .options(opts.iter().map(|o| o.to_string()).collect::<Vec<_>>())
                .build()
                .unwrap_or(m)
        })
        .collect();
    spec.set_mounts(Some(mounts));
    replaced
}
