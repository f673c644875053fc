//! Writing sysctls: each key is checked with `rund_proto::sysctl` (the
//! shim checked it at Create already) and opened beneath a /proc/sys dir fd
//! with RESOLVE_BENEATH, so no key can reach outside /proc/sys.
//!
//! A sysctl applies to the namespaces of the process that opens it, not to
//! the proc mount it is opened through, so the agent's own /proc serves
//! every container (a container's /proc may be masked or read-only).

use std::io::Write;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use rund_proto::sysctl::{check, SysctlError, SysctlNamespaces};

use rund_sys::mount::{
    openat2, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV,
};

#[derive(Debug, thiserror::Error)]
pub enum SysctlWriteError {
    #[error(transparent)]
    Key(#[from] SysctlError),
    #[error("sysctl {key}={value:?}: {op}: {errno}")]
    Sys {
        key: String,
        value: String,
        op: &'static str,
        errno: Errno,
    },
    #[error("open /proc/sys: {0}")]
    ProcSys(Errno),
}

/// The agent's /proc/sys as a dir fd (its own procfs, never a container's).
pub fn open_proc_sys() -> Result<OwnedFd, SysctlWriteError> {
    nix::fcntl::open(
        "/proc/sys",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(SysctlWriteError::ProcSys)
}

/// Inode numbers the kernel gives the initial namespaces (fixed since
/// Linux 3.8; the network one only on recent kernels, where older ones
/// number it dynamically from 0xF0000000 up, so it never matches there).
const INIT_NS: [(&str, u64); 4] = [
    ("ipc", 0xEFFF_FFFF),
    ("uts", 0xEFFF_FFFE),
    ("user", 0xEFFF_FFFD),
    ("net", 0xEFFF_FFF9),
];

/// Which namespaces of the calling process are not the host's initial
/// ones. `userns`: the sandbox runs in a user namespace of its own.
pub fn own_namespaces(userns: bool) -> SysctlNamespaces {
    let own = |kind: &str| {
        let ino = std::fs::metadata(format!("/proc/self/ns/{kind}")).map(|m| m.ino());
        let init = INIT_NS.iter().find(|(k, _)| *k == kind).map(|(_, i)| *i);
        matches!((ino, init), (Ok(i), Some(x)) if i != x)
    };
    SysctlNamespaces {
        ipc: own("ipc"),
        net: own("net"),
        uts: own("uts"),
        user: userns || own("user"),
    }
}

/// Writes each `(key, value)` beneath `proc_sys`, in order, after checking
/// the key for a writer in namespaces `ns`.
pub fn write_sysctls(
    proc_sys: BorrowedFd<'_>,
    sysctls: &[(String, String)],
    ns: &SysctlNamespaces,
) -> Result<(), SysctlWriteError> {
    for (key, value) in sysctls {
        let parts = check(key, ns)?;
        let rel: PathBuf = parts.iter().collect();
        let err = |op, errno| SysctlWriteError::Sys {
            key: key.clone(),
            value: value.clone(),
            op,
            errno,
        };
        let fd = openat2(
            proc_sys,
            Path::new(&rel),
            (OFlag::O_WRONLY | OFlag::O_TRUNC).bits(),
            0,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        )
        .map_err(|e| err("open", e))?;
        std::fs::File::from(fd)
            .write_all(value.as_bytes())
            .map_err(|e| err("write", crate::sys::io_errno(e)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn keys_are_checked_before_anything_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("kernel")).unwrap();
        std::fs::write(dir.path().join("kernel/msgmax"), "").unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let ns = SysctlNamespaces {
            ipc: true,
            ..Default::default()
        };
        let kv = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        write_sysctls(fd.as_fd(), &kv("kernel.msgmax", "100"), &ns).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("kernel/msgmax")).unwrap(),
            "100"
        );
        let e = write_sysctls(fd.as_fd(), &kv("net.ipv4.ip_forward", "1"), &ns).unwrap_err();
        assert!(matches!(e, SysctlWriteError::Key(_)), "{e}");
        let e = write_sysctls(fd.as_fd(), &kv("kernel.msgmnb", "1"), &ns).unwrap_err();
        assert!(e.to_string().contains("kernel.msgmnb"), "{e}");
    }

    #[test]
    fn a_symlink_beneath_proc_sys_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("shmmax"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("kernel")).unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let ns = SysctlNamespaces {
            ipc: true,
            ..Default::default()
        };
        let e =
            write_sysctls(fd.as_fd(), &[("kernel.shmmax".into(), "1".into())], &ns).unwrap_err();
        assert!(
            matches!(
                e,
                SysctlWriteError::Sys {
                    errno: Errno::ELOOP,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("shmmax")).unwrap(),
            ""
        );
    }
}
