//! Spec settings whose meaning depends on the namespaces a container gets:
//! `linux.rootfsPropagation`, mount propagation options and `linux.sysctl`.
//! Checked at Create, once the sandbox (and so the user namespace) is
//! known, so a bad request fails with a clear error before anything runs;
//! the agent checks again before it applies them.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use oci_spec::runtime::Spec;
use rund_proto::sysctl::{check, SysctlNamespaces};

use super::namespaces::{request, NsRequest};
use super::SpecError;

/// The values runc accepts, recursive or not.
pub const PROPAGATIONS: [&str; 8] = [
    "private",
    "rprivate",
    "slave",
    "rslave",
    "shared",
    "rshared",
    "unbindable",
    "runbindable",
];

const USERNS_SHARED: &str = "cannot be honoured in a user namespace: mounts made in the container would propagate to the host's mount namespace (the kernel turns shared mounts into slaves across user namespaces); run the pod without a user namespace (annotation rund.io/userns: host) for bidirectional mount propagation";

/// Checks propagation and sysctls for a container whose sandbox has a user
/// namespace of its own when `userns`.
pub fn check_namespaced(spec: &Spec, userns: bool) -> Result<(), SpecError> {
    let linux = spec.linux().as_ref();
    if let Some(p) = linux.and_then(|l| l.rootfs_propagation().as_deref()) {
        if !p.is_empty() && !PROPAGATIONS.contains(&p) {
            return Err(SpecError::Invalid(format!(
                "linux.rootfsPropagation {p:?} is not one of {}",
                PROPAGATIONS.join(", ")
            )));
        }
        if userns && p.ends_with("shared") {
            return Err(SpecError::Invalid(format!(
                "linux.rootfsPropagation {p:?} {USERNS_SHARED}"
            )));
        }
    }
    if userns {
        for (i, m) in spec.mounts().iter().flatten().enumerate() {
            for o in m.options().iter().flatten() {
                if o == "shared" || o == "rshared" {
                    return Err(SpecError::Invalid(format!(
                        "mount {i} ({}): propagation {o:?} {USERNS_SHARED}",
                        m.destination().display()
                    )));
                }
            }
        }
    }
    let ns = sysctl_namespaces(spec, userns)?;
    for key in linux
        .and_then(|l| l.sysctl().as_ref())
        .into_iter()
        .flat_map(|s| s.keys())
    {
        check(key, &ns).map_err(|e| SpecError::Invalid(format!("linux.sysctl: {e}")))?;
    }
    Ok(())
}

/// Which namespaces the container does not share with the host (the
/// runtime's own, as runc means it): listed without a path, or joined at a
/// path that is not the shim's own namespace.
pub fn sysctl_namespaces(spec: &Spec, userns: bool) -> Result<SysctlNamespaces, SpecError> {
    let own = |kind: &str| -> Result<bool, SpecError> {
        Ok(match request(spec, kind)? {
            NsRequest::New => true,
            NsRequest::Host => false,
            NsRequest::Join(p) => !same_ns(&p, Path::new(&format!("/proc/self/ns/{kind}"))),
        })
    };
    Ok(SysctlNamespaces {
        ipc: own("ipc")?,
        net: own("net")?,
        uts: own("uts")?,
        user: userns || own("user")?,
    })
}

/// Whether two nsfs paths name the same namespace (an unreadable path
/// counts as the host's: the safe answer).
fn same_ns(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;

    fn spec(linux: &str, mounts: &str) -> Spec {
        parse(
            format!(
                r#"{{"ociVersion":"1.0.2","process":{{"user":{{"uid":0,"gid":0}},"args":["x"],"cwd":"/"}},"root":{{"path":"r"}},
                "mounts":[{mounts}],"linux":{{{linux}}}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    const NS: &str =
        r#""namespaces":[{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"network"}]"#;

    #[test]
    fn every_runc_propagation_is_accepted_without_userns() {
        for p in PROPAGATIONS {
            let s = spec(&format!(r#""rootfsPropagation":"{p}""#), "");
            check_namespaced(&s, false).unwrap();
        }
        let s = spec(r#""rootfsPropagation":"sharedd""#, "");
        let e = check_namespaced(&s, false).unwrap_err().to_string();
        assert!(e.contains("sharedd") && e.contains("rshared"), "{e}");
    }

    #[test]
    fn shared_propagation_is_refused_in_a_user_namespace_naming_the_cause() {
        let s = spec(r#""rootfsPropagation":"rshared""#, "");
        let e = check_namespaced(&s, true).unwrap_err().to_string();
        assert!(
            e.contains("user namespace") && e.contains("rund.io/userns"),
            "{e}"
        );
        let s = spec(
            "",
            r#"{"destination":"/v","type":"bind","source":"/tmp","options":["rbind","rshared"]}"#,
        );
        check_namespaced(&s, false).unwrap();
        let e = check_namespaced(&s, true).unwrap_err().to_string();
        assert!(e.contains("mount 0 (/v)"), "{e}");
        check_namespaced(&spec(r#""rootfsPropagation":"rslave""#, ""), true).unwrap();
    }

    #[test]
    fn sysctls_follow_the_namespaces() {
        let s = spec(
            &format!(
                r#"{NS},"sysctl":{{"kernel.shm_rmid_forced":"1","net.ipv4.ping_group_range":"0 0"}}"#
            ),
            "",
        );
        check_namespaced(&s, false).unwrap();
        // Host network: net.* would change the host.
        let s = spec(
            r#""namespaces":[{"type":"pid"},{"type":"ipc"}],"sysctl":{"net.ipv4.ip_forward":"1"}"#,
            "",
        );
        let e = check_namespaced(&s, false).unwrap_err().to_string();
        assert!(
            e.contains("net.ipv4.ip_forward") && e.contains("network"),
            "{e}"
        );
        // Joining the shim's own netns by path is the host's too.
        let s = spec(
            r#""namespaces":[{"type":"pid"},{"type":"network","path":"/proc/self/ns/net"}],"sysctl":{"net.ipv4.ip_forward":"1"}"#,
            "",
        );
        assert!(check_namespaced(&s, false).is_err());
        let s = spec(&format!(r#"{NS},"sysctl":{{"vm.swappiness":"1"}}"#), "");
        let e = check_namespaced(&s, false).unwrap_err().to_string();
        assert!(
            e.contains("linux.sysctl") && e.contains("vm.swappiness"),
            "{e}"
        );
        let s = spec(&format!(r#"{NS},"sysctl":{{"kernel..shmmax":"1"}}"#), "");
        assert!(check_namespaced(&s, false).is_err());
    }
}
