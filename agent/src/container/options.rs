//! Parsing of OCI mount options into mount(2) flags, fs data and
//! mount_setattr attributes.

use nix::mount::MsFlags;

use rund_sys::mount::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Flags for mount(2).
    pub flags: MsFlags,
    /// Propagation changes applied after the mount, in order.
    pub propagation: Vec<MsFlags>,
    /// Filesystem-specific data ("mode=755,size=65536k").
    pub data: Vec<String>,
    /// Recursive bind ("rbind"). Whether a mount is a bind at all is
    /// `rund_sys::mount::is_bind`, the rule the shim uses too.
    pub recursive: bool,
    /// mount_setattr bits to set / clear on the top mount only (binds come
    /// as fds; "ro" on a bind leaves its submounts alone, as in runc).
    pub attr_set: u64,
    pub attr_clr: u64,
    /// Bits set / cleared on the whole tree ("rro", "rnosuid", ...).
    pub rattr_set: u64,
    pub rattr_clr: u64,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            flags: MsFlags::empty(),
            propagation: Vec::new(),
            data: Vec::new(),
            recursive: false,
            attr_set: 0,
            attr_clr: 0,
            rattr_set: 0,
            rattr_clr: 0,
        }
    }
}

impl MountOptions {
    pub fn data_string(&self) -> Option<String> {
        (!self.data.is_empty()).then(|| self.data.join(","))
    }
}

/// Parses OCI `mounts[].options`; unknown options are filesystem data.
pub fn parse(options: &[String]) -> MountOptions {
    let mut o = MountOptions::default();
    for opt in options {
        let (set, clr, aset, aclr): (MsFlags, MsFlags, u64, u64) = match opt.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty(), MOUNT_ATTR_RDONLY, 0),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY, 0, MOUNT_ATTR_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty(), MOUNT_ATTR_NOSUID, 0),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID, 0, MOUNT_ATTR_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty(), MOUNT_ATTR_NODEV, 0),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV, 0, MOUNT_ATTR_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty(), MOUNT_ATTR_NOEXEC, 0),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC, 0, MOUNT_ATTR_NOEXEC),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty(), 0, 0),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS, 0, 0),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty(), 0, 0),
            "mand" => (MsFlags::MS_MANDLOCK, MsFlags::empty(), 0, 0),
            "nomand" => (MsFlags::empty(), MsFlags::MS_MANDLOCK, 0, 0),
            "noatime" => (
                MsFlags::MS_NOATIME,
                MsFlags::empty(),
                MOUNT_ATTR_NOATIME,
                MOUNT_ATTR_ATIME,
            ),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME, 0, 0),
            "nodiratime" => (
                MsFlags::MS_NODIRATIME,
                MsFlags::empty(),
                MOUNT_ATTR_NODIRATIME,
                0,
            ),
            "diratime" => (
                MsFlags::empty(),
                MsFlags::MS_NODIRATIME,
                0,
                MOUNT_ATTR_NODIRATIME,
            ),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty(), 0, MOUNT_ATTR_ATIME),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME, 0, 0),
            "strictatime" => (
                MsFlags::MS_STRICTATIME,
                MsFlags::empty(),
                MOUNT_ATTR_STRICTATIME,
                MOUNT_ATTR_ATIME,
            ),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME, 0, 0),
            "bind" => continue,
            "rbind" => {
                o.recursive = true;
                continue;
            }
            "defaults" => continue,
            other => {
                if let Some((clear, bit)) = recursive_attr(other) {
                    if clear {
                        o.rattr_clr |= bit;
                        o.rattr_set &= !bit;
                    } else {
                        o.rattr_set |= bit;
                        o.rattr_clr &= !bit;
                    }
                    // mount_setattr(2): an atime mode is set by clearing
                    // the whole atime field too.
                    if bit & MOUNT_ATTR_ATIME == bit {
                        o.rattr_clr |= MOUNT_ATTR_ATIME;
                    }
                } else if let Some(p) = propagation(other) {
                    o.propagation.push(p);
                } else {
                    o.data.push(other.to_string());
                }
                continue;
            }
        };
        o.flags.insert(set);
        o.flags.remove(clr);
        // An atime mode replaces the previous one.
        if aclr == MOUNT_ATTR_ATIME {
            o.attr_set &= !MOUNT_ATTR_ATIME;
        }
        o.attr_set = (o.attr_set & !aclr) | aset;
        o.attr_clr = (o.attr_clr & !aset) | aclr;
    }
    o
}

/// runc's recursive mount attributes (`rro`, ...): (clears, MOUNT_ATTR_*).
fn recursive_attr(opt: &str) -> Option<(bool, u64)> {
    Some(match opt {
        "rro" => (false, MOUNT_ATTR_RDONLY),
        "rrw" => (true, MOUNT_ATTR_RDONLY),
        "rnosuid" => (false, MOUNT_ATTR_NOSUID),
        "rsuid" => (true, MOUNT_ATTR_NOSUID),
        "rnodev" => (false, MOUNT_ATTR_NODEV),
        "rdev" => (true, MOUNT_ATTR_NODEV),
        "rnoexec" => (false, MOUNT_ATTR_NOEXEC),
        "rexec" => (true, MOUNT_ATTR_NOEXEC),
        "rnodiratime" => (false, MOUNT_ATTR_NODIRATIME),
        "rdiratime" => (true, MOUNT_ATTR_NODIRATIME),
        "rrelatime" => (false, MOUNT_ATTR_RELATIME),
        "rnorelatime" => (true, MOUNT_ATTR_RELATIME),
        "rnoatime" => (false, MOUNT_ATTR_NOATIME),
        "ratime" => (true, MOUNT_ATTR_NOATIME),
        "rstrictatime" => (false, MOUNT_ATTR_STRICTATIME),
        "rnostrictatime" => (true, MOUNT_ATTR_STRICTATIME),
        "rnosymfollow" => (false, MOUNT_ATTR_NOSYMFOLLOW),
        "rsymfollow" => (true, MOUNT_ATTR_NOSYMFOLLOW),
        _ => return None,
    })
}

pub fn propagation(opt: &str) -> Option<MsFlags> {
    Some(match opt {
        "private" => MsFlags::MS_PRIVATE,
        "rprivate" => MsFlags::MS_PRIVATE | MsFlags::MS_REC,
        "shared" => MsFlags::MS_SHARED,
        "rshared" => MsFlags::MS_SHARED | MsFlags::MS_REC,
        "slave" => MsFlags::MS_SLAVE,
        "rslave" => MsFlags::MS_SLAVE | MsFlags::MS_REC,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        "runbindable" => MsFlags::MS_UNBINDABLE | MsFlags::MS_REC,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> MountOptions {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_and_data() {
        let o = p(&["nosuid", "noexec", "nodev", "mode=755", "size=65536k"]);
        assert_eq!(
            o.flags,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV
        );
        assert_eq!(o.data_string().as_deref(), Some("mode=755,size=65536k"));
    }

    #[test]
    fn devpts_options_are_data() {
        let o = p(&[
            "nosuid",
            "noexec",
            "newinstance",
            "ptmxmode=0666",
            "mode=0620",
            "gid=5",
        ]);
        assert_eq!(
            o.data_string().as_deref(),
            Some("newinstance,ptmxmode=0666,mode=0620,gid=5")
        );
    }

    #[test]
    fn later_option_wins() {
        let o = p(&["ro", "rw"]);
        assert!(!o.flags.contains(MsFlags::MS_RDONLY));
        assert_eq!(o.attr_set & MOUNT_ATTR_RDONLY, 0);
        assert_eq!(o.attr_clr & MOUNT_ATTR_RDONLY, MOUNT_ATTR_RDONLY);
        let o = p(&["rw", "ro"]);
        assert!(o.flags.contains(MsFlags::MS_RDONLY));
        assert_eq!(o.attr_set & MOUNT_ATTR_RDONLY, MOUNT_ATTR_RDONLY);
        assert_eq!(o.attr_clr & MOUNT_ATTR_RDONLY, 0);
    }

    #[test]
    fn bind_propagation_and_attrs() {
        let o = p(&["rbind", "ro", "nosuid", "rprivate"]);
        assert!(o.recursive);
        assert_eq!(o.propagation, vec![MsFlags::MS_PRIVATE | MsFlags::MS_REC]);
        assert_eq!(o.attr_set, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID);
        assert!(o.data.is_empty());
    }

    #[test]
    fn recursive_attrs_are_kept_apart_from_top_only_ones() {
        let o = p(&["rbind", "ro"]);
        assert_eq!((o.attr_set, o.rattr_set), (MOUNT_ATTR_RDONLY, 0));
        let o = p(&["rbind", "rro", "rnosuid"]);
        assert_eq!(o.attr_set, 0);
        assert_eq!(o.rattr_set, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID);
        assert!(o.data.is_empty(), "{:?}", o.data);
        let o = p(&["rro", "rrw"]);
        assert_eq!((o.rattr_set, o.rattr_clr), (0, MOUNT_ATTR_RDONLY));
        let o = p(&["rnoatime"]);
        assert_eq!(o.rattr_set, MOUNT_ATTR_NOATIME);
        assert_eq!(o.rattr_clr, MOUNT_ATTR_ATIME);
    }

    #[test]
    fn atime_modes_replace_each_other() {
        let o = p(&["noatime", "strictatime"]);
        assert_eq!(o.attr_set & MOUNT_ATTR_ATIME, MOUNT_ATTR_STRICTATIME);
    }
}
