//! Pod-level sysctls (the CRI pod sandbox's `linux.sysctl`, and what rund
//! adds for user-namespaced pods), written in the pod's namespaces. A
//! namespace the launcher joined belongs to the host's user namespace, so
//! its keys are written before the sandbox's own user namespace exists; the
//! agent writes the rest in the namespaces it made.

use std::io::Write;

/// The namespace a namespaced sysctl key lives in.
pub fn namespace_of(key: &str) -> Option<&'static str> {
    const IPC: [&str; 8] = [
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
    ];
    if key.starts_with("net.") {
        Some("net")
    } else if IPC.contains(&key) || key.starts_with("fs.mqueue.") {
        Some("ipc")
    } else if key == "kernel.hostname" || key == "kernel.domainname" {
        Some("uts")
    } else {
        None
    }
}

/// Writes `key=value` through /proc/sys of the caller's namespaces.
pub fn write(key: &str, value: &str) -> Result<(), String> {
    let bad = || format!("sysctl {key:?} is not a namespaced sysctl name");
    if namespace_of(key).is_none()
        || key
            .split('.')
            .any(|c| c.is_empty() || c == ".." || c.contains('/'))
    {
        return Err(bad());
    }
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| format!("sysctl {key}={value} ({path}): {e}"))
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_namespace() {
        assert_eq!(
            namespace_of("net.ipv4.ip_unprivileged_port_start"),
            Some("net")
        );
        assert_eq!(namespace_of("kernel.shm_rmid_forced"), Some("ipc"));
        assert_eq!(namespace_of("fs.mqueue.msg_max"), Some("ipc"));
        assert_eq!(namespace_of("kernel.hostname"), Some("uts"));
        assert_eq!(namespace_of("kernel.panic"), None);
        assert!(write("net..x", "1").is_err());
        assert!(write("kernel.panic", "1").is_err());
    }
}
