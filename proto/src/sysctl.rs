//! Which sysctls a container or pod may set, and where each lives beneath
//! /proc/sys. The rules are runc's (`validateSysctl`): only keys of a
//! namespace the container does not share with the host. The shim rejects
//! a bad key at Create; the agent checks again before writing.

/// The namespaces the writer runs in, as far as sysctls care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SysctlNamespaces {
    /// An ipc namespace of its own (not the host's).
    pub ipc: bool,
    /// A network namespace that is not the host's.
    pub net: bool,
    /// A uts namespace of its own.
    pub uts: bool,
    /// A user namespace of its own.
    pub user: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    #[error("sysctl {key:?}: {reason}")]
    BadKey { key: String, reason: &'static str },
    #[error("sysctl {key:?} is not allowed: {reason}")]
    NotAllowed { key: String, reason: &'static str },
}

/// IPC sysctls runc accepts with a private ipc namespace (plus fs.mqueue.*).
const IPC_KEYS: [&str; 8] = [
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// The dotted form of a key: a key written with '/' as its separator
/// (e.g. "net/ipv4/conf/eth0.100/forwarding", as Kubernetes allows) has
/// its '/' and '.' swapped, as runc does.
pub fn dotted(key: &str) -> String {
    match key.find(['.', '/']) {
        Some(i) if key.as_bytes()[i] == b'/' => key
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => key.to_string(),
    }
}

/// The path components beneath /proc/sys of a key (dotted or slashed). A
/// component can never be empty, "." or "..", so a key cannot leave
/// /proc/sys.
pub fn components(key: &str) -> Result<Vec<String>, SysctlError> {
    let bad = |reason| SysctlError::BadKey {
        key: key.to_string(),
        reason,
    };
    if key.is_empty() {
        return Err(bad("empty key"));
    }
    if key.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    dotted(key)
        .split('.')
        .map(|c| {
            // In the dotted form a '/' stands for a '.' inside one name.
            let c = c.replace('/', ".");
            match c.as_str() {
                "" => Err(bad("empty component")),
                "." | ".." => Err(bad("a component is \".\" or \"..\"")),
                _ => Ok(c),
            }
        })
        .collect()
}

/// The namespace a namespaced key belongs to: "ipc", "net", "uts" or "user".
pub fn namespace_of(key: &str) -> Option<&'static str> {
    let k = dotted(key);
    if IPC_KEYS.contains(&k.as_str()) || k.starts_with("fs.mqueue.") {
        Some("ipc")
    } else if k.starts_with("net.") {
        Some("net")
    } else if k == "kernel.domainname" || k == "kernel.hostname" {
        Some("uts")
    } else if k.starts_with("user.") {
        Some("user")
    } else {
        None
    }
}

/// Checks `key` for a writer in namespaces `ns`; returns its components
/// beneath /proc/sys.
pub fn check(key: &str, ns: &SysctlNamespaces) -> Result<Vec<String>, SysctlError> {
    let parts = components(key)?;
    let k = dotted(key);
    let deny = |reason| {
        Err(SysctlError::NotAllowed {
            key: key.to_string(),
            reason,
        })
    };
    if IPC_KEYS.contains(&k.as_str()) || k.starts_with("fs.mqueue.") {
        if !ns.ipc {
            return deny("it belongs to the ipc namespace and the container uses the host's");
        }
        return Ok(parts);
    }
    if k.starts_with("net.") {
        if !ns.net {
            return deny("it belongs to the network namespace and the container uses the host's");
        }
        return Ok(parts);
    }
    if ns.uts {
        match k.as_str() {
            "kernel.domainname" => return Ok(parts),
            "kernel.hostname" => {
                return deny("it conflicts with the OCI \"hostname\" field; set that instead")
            }
            _ => {}
        }
    }
    if k.starts_with("user.") {
        if !ns.user {
            return deny("user.* limits without a user namespace would change the host's");
        }
        return Ok(parts);
    }
    deny("it is not in a separate kernel namespace (it would change the host)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: SysctlNamespaces = SysctlNamespaces {
        ipc: true,
        net: true,
        uts: true,
        user: true,
    };

    #[test]
    fn namespaced_keys_pass_with_their_namespace() {
        for k in [
            "kernel.shm_rmid_forced",
            "kernel.msgmax",
            "fs.mqueue.msg_max",
            "net.ipv4.ip_unprivileged_port_start",
            "kernel.domainname",
            "user.max_user_namespaces",
        ] {
            assert!(check(k, &ALL).is_ok(), "{k}");
        }
        assert_eq!(
            check("kernel.shm_rmid_forced", &ALL).unwrap(),
            ["kernel", "shm_rmid_forced"]
        );
    }

    #[test]
    fn keys_of_shared_namespaces_are_refused_naming_the_key() {
        let none = SysctlNamespaces::default();
        for k in [
            "kernel.msgmax",
            "net.ipv4.ip_forward",
            "user.max_user_namespaces",
        ] {
            let e = check(k, &none).unwrap_err().to_string();
            assert!(e.contains(k), "{e}");
        }
        let e = check("kernel.domainname", &none).unwrap_err().to_string();
        assert!(e.contains("separate kernel namespace"), "{e}");
        let e = check("kernel.hostname", &ALL).unwrap_err().to_string();
        assert!(e.contains("hostname"), "{e}");
        for k in ["vm.overcommit_memory", "kernel.panic", "fs.file-max"] {
            assert!(check(k, &ALL).is_err(), "{k}");
        }
    }

    #[test]
    fn keys_never_leave_proc_sys() {
        for k in [
            "",
            "net..ipv4",
            "net.ipv4.",
            ".net",
            "net.//.x",
            "net/../../etc",
            "net.ipv4.conf.\0",
            "net/./x",
        ] {
            assert!(
                matches!(check(k, &ALL), Err(SysctlError::BadKey { .. })),
                "{k:?}: {:?}",
                check(k, &ALL)
            );
        }
    }

    #[test]
    fn slashed_keys_keep_dots_inside_names() {
        assert_eq!(
            dotted("net/ipv4/conf/eth0.100/forwarding"),
            "net.ipv4.conf.eth0/100.forwarding"
        );
        assert_eq!(
            check("net/ipv4/conf/eth0.100/forwarding", &ALL).unwrap(),
            ["net", "ipv4", "conf", "eth0.100", "forwarding"]
        );
        assert_eq!(dotted("kernel.msgmax"), "kernel.msgmax");
    }
}
