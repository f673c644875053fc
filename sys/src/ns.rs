//! Namespace files (`/proc/<pid>/ns/*`, bind-mounted namespaces): opened
//! and checked to be the kind the caller expects.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The CLONE_NEW* flag of an OCI namespace kind (`mnt` as /proc names it).
pub fn clone_flag(kind: &str) -> Option<i32> {
    Some(match kind {
        "net" => libc::CLONE_NEWNET,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "pid" => libc::CLONE_NEWPID,
        "cgroup" => libc::CLONE_NEWCGROUP,
        "user" => libc::CLONE_NEWUSER,
        "mnt" => libc::CLONE_NEWNS,
        _ => return None,
    })
}

/// Opens `path` and checks it is a namespace of `kind`.
pub fn open_ns(kind: &str, path: &Path) -> io::Result<OwnedFd> {
    let file = std::fs::File::open(path)?;
    let Some(t) = ns_type(file.as_fd()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a namespace file",
        ));
    };
    if Some(t) != clone_flag(kind) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is a different kind of namespace (type {t:#x})"),
        ));
    }
    Ok(file.into())
}

/// The CLONE_NEW* type of the namespace `fd` is, if it is one.
fn ns_type(fd: BorrowedFd<'_>) -> Option<i32> {
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the CLONE_NEW* type or -1.
    let t = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
    (t >= 0).then_some(t)
}

/// Whether `fd` is a namespace of `kind`.
pub fn is_kind(fd: BorrowedFd<'_>, kind: &str) -> bool {
    ns_type(fd).is_some_and(|t| Some(t) == clone_flag(kind))
}

/// (dev, ino) that identify a namespace.
pub fn ns_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_own_namespaces_and_rejects_others() {
        assert!(open_ns("net", Path::new("/proc/self/ns/net")).is_ok());
        let e = open_ns("ipc", Path::new("/proc/self/ns/net")).unwrap_err();
        assert!(e.to_string().contains("different kind"), "{e}");
        let e = open_ns("net", Path::new("/etc/hostname")).unwrap_err();
        assert!(e.to_string().contains("not a namespace"), "{e}");
        let mnt = std::fs::File::open("/proc/self/ns/mnt").unwrap();
        assert!(is_kind(mnt.as_fd(), "mnt") && !is_kind(mnt.as_fd(), "net"));
        let plain = std::fs::File::open("/etc/hostname").unwrap();
        assert!(!is_kind(plain.as_fd(), "mnt"));
        let e = open_ns("net", Path::new("/nonexistent/ns")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert_eq!(
            ns_id(Path::new("/proc/self/ns/net")),
            ns_id(Path::new("/proc/thread-self/ns/net"))
        );
    }
}
