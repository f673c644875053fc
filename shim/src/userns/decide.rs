//! Per-pod user namespace decision, from the spec and `[userns]`:
//! - `rund.io/userns: host` opts out (an error if the spec itself asks for
//!   a user namespace or mappings: the two contradict);
//! - `linux.uidMappings`/`gidMappings` in the spec are honoured as given;
//! - otherwise a range is leased when remapping is enabled or the spec
//!   asks for a user namespace.
//!
//! `rund.io/userns-binds: idmap|plain` says how spec bind mounts go in.

use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType, Spec};

use super::UsernsError;
use crate::config::UsernsConfig;
use crate::sandbox::idmap::{self, IdMapping};
use crate::spec::annotation;

pub const ANN_USERNS: &str = "rund.io/userns";
pub const ANN_USERNS_BINDS: &str = "rund.io/userns-binds";

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
}

pub fn decide(spec: &Spec, cfg: &UsernsConfig) -> Result<UsernsDecision, UsernsError> {
    let binds = match annotation(spec, ANN_USERNS_BINDS) {
        None | Some("idmap") => BindsMode::Idmap,
        Some("plain") => BindsMode::Plain,
        Some(v) => {
            return Err(UsernsError::Annotation {
                key: ANN_USERNS_BINDS.into(),
                reason: format!("{v:?} is not \"idmap\" or \"plain\""),
            })
        }
    };
    let host = match annotation(spec, ANN_USERNS) {
        None => false,
        Some("host") => true,
        Some(v) => {
            return Err(UsernsError::Annotation {
                key: ANN_USERNS.into(),
                reason: format!(
                    "{v:?} is not \"host\" (the only accepted value; remove it to remap)"
                ),
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
        return Err(UsernsError::Mapping(format!(
            "joining the existing user namespace {} is not supported",
            path.display()
        )));
    }
    let spec_wants = user_ns.is_some() || !uid.is_empty() || !gid.is_empty();
    if host {
        if spec_wants {
            return Err(UsernsError::Annotation {
                key: ANN_USERNS.into(),
                reason:
                    "\"host\" contradicts the spec, which asks for a user namespace or id mappings"
                        .into(),
            });
        }
        return Ok(UsernsDecision {
            mode: UsernsMode::Off,
            binds,
        });
    }
    let mode = if !uid.is_empty() || !gid.is_empty() {
        let (uid, gid) = (convert(uid), convert(gid));
        check("linux.uidMappings", &uid)?;
        check("linux.gidMappings", &gid)?;
        UsernsMode::FromSpec { uid, gid }
    } else if cfg.enabled || spec_wants {
        UsernsMode::Allocate
    } else {
        UsernsMode::Off
    };
    Ok(UsernsDecision { mode, binds })
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
    idmap::validate(kind, map).map_err(|e| match e {
        crate::sandbox::SandboxError::BadMapping(m) => UsernsError::Mapping(m),
        other => UsernsError::Mapping(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(linux: &str, annotations: &str) -> Spec {
        let text = format!(
            r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"linux":{{{linux}}},"annotations":{{{annotations}}}}}"#
        );
        crate::spec::parse(text.as_bytes()).unwrap()
    }

    fn on() -> UsernsConfig {
        UsernsConfig::default()
    }

    fn off() -> UsernsConfig {
        UsernsConfig {
            enabled: false,
            ..Default::default()
        }
    }

    #[test]
    fn default_is_allocate_with_idmapped_binds() {
        let d = decide(&spec("", ""), &on()).unwrap();
        assert_eq!(
            d,
            UsernsDecision {
                mode: UsernsMode::Allocate,
                binds: BindsMode::Idmap
            }
        );
        assert_eq!(decide(&spec("", ""), &off()).unwrap().mode, UsernsMode::Off);
        // The spec asking for a user namespace wins over a disabled pool.
        let s = spec(r#""namespaces":[{"type":"user"}]"#, "");
        assert_eq!(decide(&s, &off()).unwrap().mode, UsernsMode::Allocate);
    }

    #[test]
    fn annotations() {
        let s = spec(
            "",
            r#""rund.io/userns":"host","rund.io/userns-binds":"plain""#,
        );
        assert_eq!(
            decide(&s, &on()).unwrap(),
            UsernsDecision {
                mode: UsernsMode::Off,
                binds: BindsMode::Plain
            }
        );
        let e = decide(&spec("", r#""rund.io/userns":"private""#), &on()).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("rund.io/userns:"),
            "{e}"
        );
        let e = decide(&spec("", r#""rund.io/userns-binds":"chown""#), &on()).unwrap_err();
        assert!(e.to_string().contains("rund.io/userns-binds"), "{e}");
        let s = spec(
            r#""namespaces":[{"type":"user"}]"#,
            r#""rund.io/userns":"host""#,
        );
        assert!(decide(&s, &on())
            .unwrap_err()
            .to_string()
            .contains("contradicts"));
    }

    #[test]
    fn spec_mappings_are_honoured_and_validated() {
        let maps = r#""uidMappings":[{"containerID":0,"hostID":500000,"size":65536}],
                      "gidMappings":[{"containerID":0,"hostID":600000,"size":65536}]"#;
        let d = decide(&spec(maps, ""), &off()).unwrap();
        let m = |h| {
            vec![IdMapping {
                container_id: 0,
                host_id: h,
                size: 65536,
            }]
        };
        assert_eq!(
            d.mode,
            UsernsMode::FromSpec {
                uid: m(500000),
                gid: m(600000)
            }
        );

        let overlapping = r#""uidMappings":[{"containerID":0,"hostID":500000,"size":10},{"containerID":5,"hostID":700000,"size":10}],
                             "gidMappings":[{"containerID":0,"hostID":600000,"size":1}]"#;
        let e = decide(&spec(overlapping, ""), &on()).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("linux.uidMappings[1]"),
            "{e}"
        );
        let zero = r#""uidMappings":[{"containerID":0,"hostID":1,"size":0}],"gidMappings":[{"containerID":0,"hostID":1,"size":1}]"#;
        assert!(decide(&spec(zero, ""), &on())
            .unwrap_err()
            .to_string()
            .contains("size 0"));
        let half = r#""uidMappings":[{"containerID":0,"hostID":1,"size":1}]"#;
        assert!(decide(&spec(half, ""), &on())
            .unwrap_err()
            .to_string()
            .contains("linux.gidMappings is empty"));
        let join = r#""namespaces":[{"type":"user","path":"/proc/1/ns/user"}]"#;
        assert!(decide(&spec(join, ""), &on())
            .unwrap_err()
            .to_string()
            .contains("/proc/1/ns/user"));
    }
}
