//! A busybox root filesystem built from Debian's busybox-static, without network.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, IoContext, Result};

/// Where busybox-static installs its binary.
pub const BUSYBOX: &str = "/bin/busybox";

/// Applets linked into /bin. `trap` and `wait` are shell builtins.
pub const APPLETS: &[&str] = &[
    "sh",
    "echo",
    "cat",
    "sleep",
    "true",
    "false",
    "ls",
    "id",
    "stty",
    "ps",
    "kill",
    "wc",
    "head",
    "tail",
    "env",
    "grep",
    "hostname",
    "mount",
    "umount",
    "mkdir",
    "rm",
    "touch",
    "test",
    "[",
    "printf",
    "readlink",
    "nproc",
    "dd",
    "uname",
    "tty",
    "pwd",
    "chmod",
    "stat",
    "yes",
    "seq",
    "timeout",
    "ping",
    "ip",
    "top",
    "free",
    "du",
    "df",
    "tr",
    "sed",
    "awk",
    "sync",
    "date",
    "cut",
    "mkfifo",
    "sort",
    "uniq",
    "whoami",
    "cp",
    "mv",
    "ln",
    "basename",
    "dirname",
    "find",
    "xargs",
    "tee",
    "setsid",
    "pidof",
    "which",
    "sha256sum",
    "unshare",
    "dmesg",
];

const DIRS: &[&str] = &[
    "bin",
    "etc",
    "proc",
    "sys",
    "dev",
    "dev/pts",
    "dev/shm",
    "dev/mqueue",
    "tmp",
    "run",
    "root",
    "var",
    "var/tmp",
    "home",
];

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                      daemon:x:1:1:daemon:/usr/sbin:/bin/false\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n";

/// Build a busybox rootfs in `dir` (created if needed): /bin/busybox plus applet symlinks,
/// /etc/passwd, /etc/group, /etc/hostname and the usual empty mount points.
pub fn busybox_rootfs(dir: &Path) -> Result<()> {
    if !Path::new(BUSYBOX).is_file() {
        return Err(Error::ToolMissing(format!(
            "{BUSYBOX} (Debian package busybox-static)"
        )));
    }
    for d in DIRS {
        let p = dir.join(d);
        std::fs::create_dir_all(&p).ctx("create rootfs dir", &p)?;
    }
    for d in ["tmp", "var/tmp"] {
        let p = dir.join(d);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777))
            .ctx("chmod rootfs dir", &p)?;
    }
    let bb = dir.join("bin/busybox");
    std::fs::copy(BUSYBOX, &bb).ctx("copy busybox", &bb)?;
    for applet in APPLETS {
        let l = dir.join("bin").join(applet);
        if l.symlink_metadata().is_err() {
            symlink("busybox", &l).ctx("link applet", &l)?;
        }
    }
    for (name, content) in [
        ("etc/passwd", PASSWD),
        ("etc/group", GROUP),
        ("etc/hostname", "rund\n"),
        ("etc/resolv.conf", ""),
        ("etc/hosts", "127.0.0.1 localhost\n"),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, content).ctx("write rootfs file", &p)?;
    }
    Ok(())
}

/// Base directory for everything the harness creates on the host.
pub const HARNESS_BASE: &str = "/tmp/rund-it";

static SHARED: OnceLock<PathBuf> = OnceLock::new();

/// One busybox rootfs per test process at `/tmp/rund-it/rootfs-<pid>`, removed at process exit.
/// Stale ones left by killed test processes are removed on first use.
pub fn shared_busybox_rootfs() -> Result<&'static Path> {
    if let Some(p) = SHARED.get() {
        return Ok(p);
    }
    std::fs::create_dir_all(HARNESS_BASE).ctx("create harness base", HARNESS_BASE)?;
    remove_stale_rootfs();
    let dir = PathBuf::from(format!("{HARNESS_BASE}/rootfs-{}", std::process::id()));
    // Two threads may race here: building twice into the same dir is harmless (idempotent).
    busybox_rootfs(&dir)?;
    let p = SHARED.get_or_init(|| dir);
    register_exit_cleanup();
    Ok(p)
}

fn remove_stale_rootfs() {
    let Ok(rd) = std::fs::read_dir(HARNESS_BASE) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("rootfs-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

extern "C" fn remove_shared_rootfs() {
    if let Some(p) = SHARED.get() {
        let _ = std::fs::remove_dir_all(p);
    }
}

fn register_exit_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" fn with no captured state; it only touches a
        // OnceLock and the filesystem, both valid during exit.
        unsafe {
            libc::atexit(remove_shared_rootfs);
        }
    });
}
