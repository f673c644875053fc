//! What the spec's `linux.namespaces` asks for, at the two levels rund has:
//! the sandbox (the agent's namespaces) and the container inside it.

use std::path::PathBuf;

use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::SpecError;

/// One namespace request from the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NsRequest {
    /// Listed without a path: a fresh namespace.
    New,
    /// Listed with a path: join it.
    Join(PathBuf),
    /// Not listed: the runtime's (host) namespace.
    Host,
}

/// The kinds rund plans; the mount namespace is always new per container
/// and the user namespace belongs to the sandbox.
pub const KINDS: [&str; 5] = ["pid", "net", "ipc", "uts", "cgroup"];

fn kind_of(t: LinuxNamespaceType) -> Option<&'static str> {
    Some(match t {
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "net",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Mount => "mnt",
        LinuxNamespaceType::Time => "time",
    })
}

fn is_runtime_ns(kind: &str, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match (
        id(path),
        id(&std::path::Path::new("/proc/self/ns").join(kind)),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The request for `kind` ("pid", "net", "ipc", "uts", "cgroup", "user", "mnt").
pub fn request(spec: &Spec, kind: &str) -> Result<NsRequest, SpecError> {
    let Some(list) = spec.linux().as_ref().and_then(|l| l.namespaces().as_ref()) else {
        return Ok(NsRequest::Host);
    };
    for ns in list {
        if kind_of(ns.typ()) == Some(kind) {
            return Ok(match ns.path() {
                Some(p) if !p.as_os_str().is_empty() => {
                    if !p.is_absolute() {
                        return Err(SpecError::Invalid(format!(
                            "namespace path {} for {kind} is not absolute",
                            p.display()
                        )));
                    }
                    // The runtime's own namespace named by path (e.g. ctr's
                    // `--with-ns pid:/proc/1/ns/pid`) is the host's.
                    if is_runtime_ns(kind, p) {
                        NsRequest::Host
                    } else {
                        NsRequest::Join(p.clone())
                    }
                }
                _ => NsRequest::New,
            });
        }
    }
    Ok(NsRequest::Host)
}

/// Namespaces of the sandbox agent, derived from the spec of the container
/// that creates the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxNamespaces {
    pub userns: bool,
    pub new_net: bool,
    pub new_ipc: bool,
    pub new_uts: bool,
    /// hostPID: the agent stays in the host pid namespace.
    pub host_pid: bool,
    /// (kind, path) to join before the user namespace is created.
    pub join: Vec<(String, PathBuf)>,
}

pub fn sandbox_namespaces(spec: &Spec) -> Result<SandboxNamespaces, SpecError> {
    let mut out = SandboxNamespaces::default();
    if let Some(list) = spec.linux().as_ref().and_then(|l| l.namespaces().as_ref()) {
        if list.iter().any(|n| n.typ() == LinuxNamespaceType::Time) {
            return Err(SpecError::Unsupported(
                "linux.namespaces",
                "time namespace".into(),
            ));
        }
    }
    match request(spec, "user")? {
        NsRequest::New => out.userns = true,
        // containerd >= 2.0 pins the pod's user namespace (made with the
        // spec's maps) and names it; the launcher joins it first.
        NsRequest::Join(p) => {
            out.userns = true;
            out.join.push(("user".to_string(), p));
        }
        NsRequest::Host => {}
    }
    match request(spec, "pid")? {
        NsRequest::Host => out.host_pid = true,
        NsRequest::New => {}
        NsRequest::Join(p) => {
            return Err(SpecError::Unsupported(
                "linux.namespaces",
                format!(
                    "joining pid namespace {} for a pod sandbox (its agent is PID 1 of a pid namespace of its own, or in the host's)",
                    p.display()
                ),
            ))
        }
    }
    for (kind, flag) in [
        ("net", &mut out.new_net),
        ("ipc", &mut out.new_ipc),
        ("uts", &mut out.new_uts),
    ] {
        match request(spec, kind)? {
            NsRequest::New => *flag = true,
            NsRequest::Join(p) => out.join.push((kind.to_string(), p)),
            NsRequest::Host => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;

    fn spec(ns: &str) -> Spec {
        parse(
            format!(
                r#"{{"ociVersion":"1.0.2","process":{{"user":{{"uid":0,"gid":0}},"args":["x"],"cwd":"/"}},"root":{{"path":"r"}},
                "linux":{{"namespaces":[{ns}]}}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn ctr_defaults_give_new_namespaces() {
        let s = spec(
            r#"{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"mount"},{"type":"network"}"#,
        );
        let sb = sandbox_namespaces(&s).unwrap();
        assert!(sb.new_net && sb.new_ipc && sb.new_uts && !sb.userns);
        assert!(sb.join.is_empty());
        assert_eq!(request(&s, "cgroup").unwrap(), NsRequest::Host);
    }

    #[test]
    fn paths_are_joined_and_host_is_kept() {
        let s = spec(r#"{"type":"pid"},{"type":"network","path":"/var/run/netns/x"}"#);
        let sb = sandbox_namespaces(&s).unwrap();
        assert_eq!(
            sb.join,
            vec![("net".to_string(), PathBuf::from("/var/run/netns/x"))]
        );
        assert!(!sb.new_ipc && !sb.new_uts);
    }

    #[test]
    fn host_pid_is_planned_and_relative_paths_are_refused() {
        let sb = sandbox_namespaces(&spec(r#"{"type":"network"}"#)).unwrap();
        assert!(sb.host_pid && sb.new_net);
        let e =
            sandbox_namespaces(&spec(r#"{"type":"pid","path":"/run/other/ns/pid"}"#)).unwrap_err();
        assert!(e.to_string().contains("/run/other/ns/pid"), "{e}");
        // Our own namespace by path is the host's.
        let own = sandbox_namespaces(&spec(r#"{"type":"pid","path":"/proc/self/ns/pid"}"#));
        assert!(own.unwrap().host_pid);
        let e = request(
            &spec(r#"{"type":"pid"},{"type":"network","path":"netns"}"#),
            "net",
        )
        .unwrap_err();
        assert!(e.to_string().contains("not absolute"), "{e}");
    }

    #[test]
    fn user_namespace_request() {
        let sb = sandbox_namespaces(&spec(r#"{"type":"pid"},{"type":"user"}"#)).unwrap();
        assert!(sb.userns);
    }
}
