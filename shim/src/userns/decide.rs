//! Per-pod user namespace decision, from the spec, `[userns] mode` and the
//! policy:
//! - `linux.uidMappings`/`gidMappings` in the spec are honoured as given
//!   (CRI `hostUsers: false` on containerd >= 1.7, `ctr run --uidmap`); a
//!   user namespace path (containerd >= 2.0 pins the pod's) is joined, and
//!   its maps must be the spec's;
//! - a `user` namespace in the spec without mappings, or
//!   `rund.io/userns: "pod"`, leases a range from the pool;
//! - otherwise mode "always" leases a range, mode "requested" does not;
//! - `rund.io/userns: host` opts out; under mode "always" only where
//!   `[policy] allow_userns_host` allows it (an error if the spec itself asks
//!   for a user namespace: the two contradict).
//!
//! `rund.io/userns-binds: idmap|plain` says how spec bind mounts go in.

use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType, Spec};

use super::idmap::{self, IdMapping};
use super::UsernsError;
use crate::config::{RemapMode, UsernsConfig};
use crate::policy::PolicyError;
use crate::spec::annotation;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsernsMode {
    /// The host user namespace: no remapping.
    Off,
    /// The spec's own mappings, validated.
    FromSpec {
        uid: Vec<IdMapping>,
        gid: Vec<IdMapping>,
    },
    /// Lease a range from the pool (`LeaseStore::allocate`).
    Allocate,
}

/// How spec bind mounts enter a remapped container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindsMode {
    /// Idmapped with the sandbox's map (KEP-127): host ownership reads
    /// correctly inside, and container root writes as host root.
    #[default]
    Idmap,
    /// Plain binds (docker userns-remap): files appear owned by overflow
    /// ids, and container root writes as the mapped host uid.
    Plain,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernsDecision {
    pub mode: UsernsMode,
    pub binds: BindsMode,
    /// Remapped only because of `[userns] mode = "always"`: the pod did not
    /// ask, so the admin's exemptions (`on_privileged`, `on_unsupported`)
    /// may still run it without a user namespace.
    pub by_mode: bool,
}

/// `rund.io/userns-binds`.
pub fn binds_mode(spec: &Spec) -> Result<BindsMode, UsernsError> {
    match annotation(spec, rund_annotations::USERNS_BINDS) {
        None | Some("idmap") => Ok(BindsMode::Idmap),
        Some("plain") => Ok(BindsMode::Plain),
        Some(v) => Err(UsernsError::Annotation {
            key: rund_annotations::USERNS_BINDS.into(),
            reason: format!("{v:?} is not \"idmap\" or \"plain\""),
        }),
    }
}

/// What the pod itself asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Nothing,
    Pod,
    Host,
}

/// Whether the pod asks for a user namespace itself (spec or annotation),
/// as opposed to getting one from mode "always".
pub fn pod_asks(spec: &Spec) -> bool {
    let linux = spec.linux().as_ref();
    let user_ns = linux
        .and_then(|l| l.namespaces().as_ref())
        .is_some_and(|list| list.iter().any(|n| n.typ() == LinuxNamespaceType::User));
    let maps = linux.is_some_and(|l| {
        l.uid_mappings().as_ref().is_some_and(|m| !m.is_empty())
            || l.gid_mappings().as_ref().is_some_and(|m| !m.is_empty())
    });
    user_ns || maps || annotation(spec, rund_annotations::USERNS) == Some("pod")
}

pub fn decide(
    spec: &Spec,
    cfg: &UsernsConfig,
    allow_userns_host: bool,
) -> Result<UsernsDecision, UsernsError> {
    let binds = binds_mode(spec)?;
    let ask = match annotation(spec, rund_annotations::USERNS) {
        None => Ask::Nothing,
        Some("pod") => Ask::Pod,
        Some("host") => Ask::Host,
        Some(v) => {
            return Err(UsernsError::Annotation {
                key: rund_annotations::USERNS.into(),
                reason: format!("{v:?} is not \"pod\" (remap this pod) or \"host\" (do not)"),
            })
        }
    };
    let linux = spec.linux().as_ref();
    let uid = linux
        .and_then(|l| l.uid_mappings().as_deref())
        .unwrap_or_default();
    let gid = linux
        .and_then(|l| l.gid_mappings().as_deref())
        .unwrap_or_default();
    let user_ns = linux
        .and_then(|l| l.namespaces().as_ref())
        .and_then(|list| list.iter().find(|n| n.typ() == LinuxNamespaceType::User));
    if let Some(path) = user_ns.and_then(|n| n.path().as_ref()) {
        // Joined only with the maps it must have (the launch checks them).
        if uid.is_empty() || gid.is_empty() {
            return Err(UsernsError::Mapping(format!(
                "joining the user namespace {} needs its uid and gid mappings in the spec",
                path.display()
            )));
        }
    }
    let spec_wants = user_ns.is_some() || !uid.is_empty() || !gid.is_empty();
    let decision = |mode, by_mode| {
        Ok(UsernsDecision {
            mode,
            binds,
            by_mode,
        })
    };
    if ask == Ask::Host {
        if spec_wants {
            return Err(UsernsError::Annotation {
                key: rund_annotations::USERNS.into(),
                reason:
                    "\"host\" contradicts the spec, which asks for a user namespace or id mappings"
                        .into(),
            });
        }
        // Under mode "requested" this is what the pod gets anyway.
        if cfg.mode == RemapMode::Always && !allow_userns_host {
            return Err(PolicyError::new(
                format!("annotation {}=\"host\"", rund_annotations::USERNS),
                "[policy] allow_userns_host",
                "it is false, and [userns] mode = \"always\" remaps every pod",
            )
            .into());
        }
        return decision(UsernsMode::Off, false);
    }
    if !uid.is_empty() || !gid.is_empty() {
        let (uid, gid) = (convert(uid), convert(gid));
        check("linux.uidMappings", &uid)?;
        check("linux.gidMappings", &gid)?;
        return decision(UsernsMode::FromSpec { uid, gid }, false);
    }
    if spec_wants || ask == Ask::Pod {
        return decision(UsernsMode::Allocate, false);
    }
    match cfg.mode {
        RemapMode::Always => decision(UsernsMode::Allocate, true),
        RemapMode::Requested => decision(UsernsMode::Off, false),
    }
}

fn convert(list: &[LinuxIdMapping]) -> Vec<IdMapping> {
    list.iter()
        .map(|m| IdMapping {
            container_id: m.container_id(),
            host_id: m.host_id(),
            size: m.size(),
        })
        .collect()
}

fn check(kind: &str, map: &[IdMapping]) -> Result<(), UsernsError> {
    if map.is_empty() {
        return Err(UsernsError::Mapping(format!(
            "{kind} is empty while the other one is set: give both"
        )));
    }
    Ok(idmap::validate(kind, map)?)
}

#[cfg(test)]
mod tests;
