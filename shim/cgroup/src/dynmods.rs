//! `[cgroup] favor_dynmods`: the kernel's `favordynmods` cgroup mount
//! option, which keeps the global threadgroup rwsem on its slow path so a
//! `cgroup.procs` write never waits an RCU grace period (`prime.rs`: about
//! 10 ms for the first placement after a quiet spell). The price is the
//! kernel's: forks and exits node-wide take a slower lock. The option holds
//! node-wide while any cgroup hierarchy mounted with it exists, so rund
//! mounts a named v1 hierarchy with no controllers and the option
//! (`name=rund-dynmods`) unless a cgroup mount already has it. rund never
//! makes cgroups in that hierarchy (`hierarchy.rs` skips it).

use std::fs::OpenOptions;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::mount::{mount, MsFlags};

use crate::error::{Error, Result};

/// The named hierarchy rund mounts for the option.
pub const HIERARCHY: &str = "rund-dynmods";
const OPTIONS: &str = "none,name=rund-dynmods,favordynmods";

/// Whether some cgroup mount in `mountinfo` has favordynmods.
pub fn on_in(mountinfo: &str) -> bool {
    mountinfo.lines().any(|l| {
        let Some((_, post)) = l.split_once(" - ") else {
            return false;
        };
        let f: Vec<&str> = post.split_whitespace().collect();
        matches!(f.first(), Some(&"cgroup" | &"cgroup2"))
            && f.get(2)
                .is_some_and(|o| o.split(',').any(|o| o == "favordynmods"))
    })
}

/// What [`ensure`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Favor {
    /// A cgroup mount already has the option (the admin's, or ours).
    AlreadyOn,
    /// rund mounted its named hierarchy here.
    Mounted(PathBuf),
}

/// Turns favordynmods on for the node: mounts `name=rund-dynmods` at `dir`
/// unless a cgroup mount has the option already. Serialised by a lock file
/// beside `dir`, so racing shims mount it once.
pub fn ensure(dir: &Path) -> Result<Favor> {
    if on_in(&mountinfo()?) {
        return Ok(Favor::AlreadyOn);
    }
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| Error::io("mkdir", parent, e))?;
    }
    let lock_path = dir.with_extension("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| Error::io("open", &lock_path, e))?;
    let _lock = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io("flock", &lock_path, e.into()))?;
    if on_in(&mountinfo()?) {
        return Ok(Favor::AlreadyOn);
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("mkdir", dir, e)),
    }
    mount(
        Some("cgroup"),
        dir,
        Some("cgroup"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(OPTIONS),
    )
    .map_err(|e| Error::FavorDynmods {
        path: dir.to_path_buf(),
        source: e,
    })?;
    Ok(Favor::Mounted(dir.to_path_buf()))
}

/// Unmounts rund's hierarchy at `dir` if it is mounted there. The kernel
/// drops the option with the hierarchy's last mount.
pub fn release(dir: &Path) -> Result<bool> {
    let text = mountinfo()?;
    let here = text.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4).is_some_and(|m| Path::new(m) == dir) && l.contains(&format!("name={HIERARCHY}"))
    });
    if !here {
        return Ok(false);
    }
    nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| Error::io("umount", dir, e.into()))?;
    let _ = std::fs::remove_dir(dir);
    Ok(true)
}

fn mountinfo() -> Result<String> {
    let p = Path::new("/proc/self/mountinfo");
    std::fs::read_to_string(p).map_err(|e| Error::io("read", p, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn finds_the_option_on_either_cgroup_version_only() {
        assert!(!on_in(PLAIN));
        let v1 = format!(
            "{PLAIN}40 25 0:40 / /run/rund/dynmods rw - cgroup cgroup rw,favordynmods,name=rund-dynmods\n"
        );
        assert!(on_in(&v1));
        let v2 = "31 25 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,favordynmods\n";
        assert!(on_in(v2));
        let other = "50 25 0:50 / /mnt rw - tmpfs tmpfs rw,favordynmods\n";
        assert!(!on_in(other), "not a cgroup mount");
    }
}
