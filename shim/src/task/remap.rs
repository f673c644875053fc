//! Remapping at Create (the user-namespace step): the sandbox's id range (leased, or from the
//! spec), and the host-side mount trees remapped for it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use containerd_shim_protos::types::mount::Mount;
use oci_spec::runtime::{MountBuilder, Spec};

use super::Service;
use super::TaskError;
use crate::config::{OnPrivileged, OnUnsupported, RemapMode, RundConfig};
use crate::error::{Result, ShimError};
use crate::policy::PolicyError;
use crate::rootfs;
use crate::sandbox::Sandbox;
use crate::sandbox::UsernsInfo;
use crate::userns::idmap::IdMapping;
use crate::userns::{self, BindsMode, LeaseStore, UsernsMode};

/// Maps and bookkeeping for a new sandbox's user namespace.
pub struct Plan {
    pub uid_map: Vec<IdMapping>,
    pub gid_map: Vec<IdMapping>,
    pub info: UsernsInfo,
    /// Sysctls to set in the pod's network namespace, which the host owns
    /// (a joined CNI netns): without them container root, remapped, could
    /// not bind ports below 1024 or ping. Only when rund chose the remap
    /// (mode "always" or `rund.io/userns: "pod"`) and the spec leaves the
    /// key unset; containerd sets its own when it asks for the namespace.
    pub pod_sysctls: Vec<(String, String)>,
}

/// What rund sets in a host-owned pod netns of a pod it remaps (containerd's
/// `enable_unprivileged_ports` and `enable_unprivileged_icmp`).
pub const POD_SYSCTLS: [(&str, &str); 2] = [
    ("net.ipv4.ip_unprivileged_port_start", "0"),
    ("net.ipv4.ping_group_range", "0 2147483647"),
];

/// Decides whether the new sandbox gets a user namespace, and leases its
/// range. `None` = no user namespace. `bundle` and `rootfs` (the Create's
/// mounts) are probed for idmap support under `on_unsupported = "host"`.
pub async fn plan(
    svc: &Service,
    spec: &Spec,
    sandbox_id: &str,
    bundle: &Path,
    rootfs: &[Mount],
) -> Result<Option<Plan>> {
    let config = svc.config();
    let Some(judged) = judge(&config, spec, sandbox_id)? else {
        return Ok(None);
    };
    if judged.needs_probe {
        let paths = idmap_candidates(bundle, rootfs, spec)?;
        // Any valid map shows what the filesystems allow: the pool's first range.
        let probe = vec![IdMapping {
            container_id: 0,
            host_id: config.userns.base,
            size: config.userns.size,
        }];
        let unsupported = tokio::task::spawn_blocking(move || {
            let ns = userns::userns_with_maps(&probe, &probe)?;
            Ok::<_, userns::UsernsError>(userns::first_unsupported(&paths, ns.as_fd()))
        })
        .await
        .map_err(TaskError::blocking("user namespace probe"))??;
        if let Some(e) = unsupported {
            tracing::warn!(id = sandbox_id, "no user namespace for this pod: {e}");
            return Ok(None);
        }
    }
    let id = sandbox_id.to_string();
    let owner = std::process::id() as i32;
    tokio::task::spawn_blocking(move || lease(&config, judged, &id, owner))
        .await
        .map_err(TaskError::blocking("user namespace lease"))?
        .map(Some)
        .map_err(ShimError::from)
}

/// What [`plan`] judges from the spec and config alone, before it leases.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// `FromSpec` or `Allocate`.
    mode: UsernsMode,
    /// `on_unsupported = "host"` under mode "always": the Create's rootfs
    /// decides, probed for idmap support first.
    pub needs_probe: bool,
    pod_sysctls: Vec<(String, String)>,
}

/// Whether the sandbox of `spec` gets a user namespace (`None`: not), from
/// the spec and config alone. A pod that needs the host's is refused or
/// runs without one, as `[userns] on_privileged` says.
pub fn judge(config: &RundConfig, spec: &Spec, sandbox_id: &str) -> Result<Option<Judged>> {
    let decision = userns::decide(spec, &config.userns, config.policy.allow_userns_host)?;
    if decision.mode == UsernsMode::Off {
        return Ok(None);
    }
    let ns = crate::spec::namespaces::sandbox_namespaces(spec)?;
    if decision.by_mode {
        let caps = &config.userns.privileged_caps;
        if let Some(why) = userns::privileged::needs_host(spec, !ns.new_net, caps) {
            match config.userns.on_privileged {
                OnPrivileged::Refuse => return Err(refuse_privileged(sandbox_id, &why).into()),
                OnPrivileged::Host => {
                    tracing::warn!(
                        id = sandbox_id,
                        "no user namespace for this pod: {why} ([userns] on_privileged = \"host\")"
                    );
                    return Ok(None);
                }
            }
        }
    }
    let joined_net = ns.join.iter().any(|(kind, _)| kind == "net");
    let pod_sysctls = match decision.mode {
        UsernsMode::Allocate if joined_net => pod_sysctls(spec),
        _ => Vec::new(),
    };
    Ok(Some(Judged {
        mode: decision.mode,
        needs_probe: decision.by_mode && config.userns.on_unsupported == OnUnsupported::Host,
        pod_sysctls,
    }))
}

/// Leases the judged ids in the node's lease file for `owner_pid` (blocking):
/// a range of the pool, or the spec's own ranges recorded so the pool never
/// hands them out while this sandbox runs. Both are idempotent per sandbox
/// id: a second call for the same sandbox gets the same range.
pub fn lease(
    config: &RundConfig,
    judged: Judged,
    sandbox_id: &str,
    owner_pid: i32,
) -> std::result::Result<Plan, userns::UsernsError> {
    let store = LeaseStore::in_state_dir(&config.state_dir, &config.userns)?;
    match judged.mode {
        UsernsMode::Off => Err(userns::UsernsError::Config(
            "no user namespace: no ids to lease".into(),
        )),
        UsernsMode::FromSpec { uid, gid } => {
            let host_root = uid
                .iter()
                .find(|m| m.container_id == 0)
                .map(|m| m.host_id)
                .unwrap_or(0);
            let ranges: Vec<(u32, u32)> = uid
                .iter()
                .chain(&gid)
                .map(|m| (m.host_id, m.size))
                .collect();
            let recorded = store.reserve(sandbox_id, owner_pid, &ranges)?;
            Ok(Plan {
                uid_map: uid,
                gid_map: gid,
                info: UsernsInfo {
                    host_root,
                    lease: (recorded > 0).then_some(store),
                },
                pod_sysctls: Vec::new(),
            })
        }
        UsernsMode::Allocate => {
            let lease = store.allocate(sandbox_id, owner_pid)?;
            let map = userns::lease_map(&lease);
            Ok(Plan {
                uid_map: map.clone(),
                gid_map: map,
                info: UsernsInfo {
                    host_root: lease.host_base,
                    lease: Some(store),
                },
                pod_sysctls: judged.pod_sysctls,
            })
        }
    }
}

/// [`POD_SYSCTLS`] that the spec does not set itself.
fn pod_sysctls(spec: &Spec) -> Vec<(String, String)> {
    let set = spec.linux().as_ref().and_then(|l| l.sysctl().as_ref());
    POD_SYSCTLS
        .iter()
        .filter(|(k, _)| !set.is_some_and(|s| s.contains_key(*k)))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn refuse_privileged(container: &str, why: &str) -> PolicyError {
    PolicyError::new(
        format!("container {container} ({why})"),
        "[userns] on_privileged",
        "it is \"refuse\", and [userns] mode = \"always\" runs every pod in a user namespace; \
         on_privileged = \"host\" runs such pods without one",
    )
}

/// The sources the pod's mounts would idmap, with "recursive": the overlay
/// lowers, a bind or directory rootfs, and idmapped spec binds.
fn idmap_candidates(bundle: &Path, rootfs: &[Mount], spec: &Spec) -> Result<Vec<(PathBuf, bool)>> {
    let mut out = Vec::new();
    if rootfs::idmapped::is_overlay(rootfs) {
        for o in &rootfs[0].options {
            if let Some(v) = o.strip_prefix("lowerdir=") {
                out.extend(v.split(':').map(|l| (PathBuf::from(l), false)));
            }
        }
    } else if rootfs.is_empty() {
        let root = spec
            .root()
            .as_ref()
            .map(|r| r.path().clone())
            .unwrap_or_default();
        out.push((bundle.join(root), true));
    } else {
        for m in rootfs
            .iter()
            .filter(|m| rund_sys::mount::is_bind(Some(&m.type_), &m.options))
        {
            out.push((PathBuf::from(&m.source), true));
        }
    }
    if userns::binds_mode(spec)? == BindsMode::Idmap {
        for m in spec.mounts().iter().flatten() {
            let opts = m.options().clone().unwrap_or_default();
            let bind = rund_sys::mount::is_bind(m.typ().as_deref(), &opts);
            let Some(src) = m.source().as_ref().filter(|_| bind) else {
                continue;
            };
            if src.exists() && userns::plain_bind_reason(src).is_none() {
                out.push((src.clone(), opts.iter().any(|o| o == "rbind")));
            }
        }
    }
    Ok(out)
}

/// How bind sources are mounted for this container. Under mode "always",
/// a container that needs the host user namespace (privileged, or a listed
/// capability in a host netns) in a pod that did not ask for a user
/// namespace is refused: the pod's sandbox already runs in one.
pub fn container_binds(
    spec: &Spec,
    svc: &Service,
    sandbox: &Sandbox,
    id: &str,
) -> Result<BindsMode> {
    let binds = userns::binds_mode(spec)?;
    let config = svc.config();
    if sandbox.userns_info.is_none()
        || config.userns.mode != RemapMode::Always
        || userns::pod_asks(spec)
    {
        return Ok(binds);
    }
    let caps = &config.userns.privileged_caps;
    let Some(why) = userns::privileged::needs_host(spec, !sandbox.owns_net, caps) else {
        return Ok(binds);
    };
    let mut e = refuse_privileged(id, &why);
    if config.userns.on_privileged == OnPrivileged::Host {
        e.reason = format!(
            "it is \"host\", but that exempts a pod only when its sandbox starts, and this pod's \
             sandbox already runs in a user namespace ([userns] mode = \"always\"); a CRI pod \
             opts out with {}: host, which needs [policy] allow_userns_host",
            rund_annotations::USERNS
        );
    }
    Err(e.into())
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

/// Mounts that ask for an idmapped mount themselves (OCI `uidMappings` /
/// `gidMappings`, or `idmap` / `ridmap`; containerd 2.x sets them in a
/// `hostUsers: false` pod): rund idmaps binds with the pod's map only, so a
/// mount's own map must send container root where the pod's does.
pub fn check_mount_idmaps(spec: &Spec, sandbox: &Sandbox, mode: BindsMode) -> Result<()> {
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        let uid = m.uid_mappings().as_deref().unwrap_or_default();
        let gid = m.gid_mappings().as_deref().unwrap_or_default();
        let opt = m
            .options()
            .iter()
            .flatten()
            .any(|o| o == "idmap" || o == "ridmap");
        if uid.is_empty() && gid.is_empty() && !opt {
            continue;
        }
        let what = format!("mounts[{i}] ({})", m.destination().display());
        let Some(info) = sandbox
            .userns_info
            .as_ref()
            .filter(|_| mode == BindsMode::Idmap)
        else {
            return Err(TaskError::IdmapWithoutUserns { what }.into());
        };
        for (field, map) in [("uidMappings", uid), ("gidMappings", gid)] {
            let root = map
                .iter()
                .find(|r| r.container_id() == 0)
                .map(|r| r.host_id());
            if !map.is_empty() && root != Some(info.host_root) {
                return Err(TaskError::IdmapRootMismatch {
                    what,
                    field,
                    root,
                    host_root: info.host_root,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// A bind source as a detached tree (idmapped unless binds are "plain").
pub fn bind_tree(
    src: &Path,
    recursive: bool,
    sandbox: &Sandbox,
    mode: BindsMode,
) -> Result<OwnedFd> {
    if sandbox.userns_info.is_some() && mode == BindsMode::Idmap {
        if let Some(why) = userns::plain_bind_reason(src) {
            tracing::debug!("bind of {} not idmapped: {why}", src.display());
            return Ok(rootfs::open_tree_clone(src, recursive)?);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_sysctls_leave_what_the_spec_sets() {
        let spec = |sysctl: &str| {
            let text = format!(
                r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"linux":{{"sysctl":{{{sysctl}}}}}}}"#
            );
            crate::spec::parse(text.as_bytes()).unwrap()
        };
        let all = pod_sysctls(&spec(""));
        assert_eq!(
            all,
            vec![
                ("net.ipv4.ip_unprivileged_port_start".into(), "0".into()),
                ("net.ipv4.ping_group_range".into(), "0 2147483647".into()),
            ]
        );
        let own = pod_sysctls(&spec(r#""net.ipv4.ip_unprivileged_port_start":"1024""#));
        assert_eq!(
            own,
            vec![("net.ipv4.ping_group_range".into(), "0 2147483647".into())]
        );
    }

    #[test]
    fn idmap_candidates_are_the_sources_that_would_be_idmapped() {
        let text = r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"mounts":[
            {"destination":"/data","type":"bind","source":"/tmp","options":["rbind"]},
            {"destination":"/dev/fuse","type":"bind","source":"/dev/fuse","options":["bind"]},
            {"destination":"/p","type":"bind","source":"/proc/sys","options":["rbind"]},
            {"destination":"/gone","type":"bind","source":"/nonexistent-rund","options":["bind"]},
            {"destination":"/proc","type":"proc","source":"proc"}]}"#;
        let spec = crate::spec::parse(text.as_bytes()).unwrap();
        let bundle = Path::new("/b");
        let got = idmap_candidates(bundle, &[], &spec).unwrap();
        assert_eq!(
            got,
            vec![
                (PathBuf::from("/b/rootfs"), true),
                (PathBuf::from("/tmp"), true)
            ]
        );
        let overlay = Mount {
            type_: "overlay".into(),
            source: "overlay".into(),
            options: vec!["lowerdir=/l1:/l2".into(), "upperdir=/u".into()],
            ..Default::default()
        };
        let got = idmap_candidates(bundle, &[overlay], &spec).unwrap();
        assert_eq!(
            got[..2],
            [(PathBuf::from("/l1"), false), (PathBuf::from("/l2"), false)]
        );
    }
}
