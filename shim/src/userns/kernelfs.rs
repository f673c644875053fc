//! Bind sources that are never idmapped: device nodes (as `linux.devices`
//! under a user namespace) and anything on a kernel filesystem (devtmpfs,
//! proc, sysfs, cgroup, ...). The kernel refuses idmapped mounts there, and
//! their ownership means nothing to the container anyway; they are bound
//! plainly, as runc binds them.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Filesystems without idmapped-mount support whose files the kernel, not
/// a disk, provides.
const KERNEL_FS: [&str; 17] = [
    "devtmpfs",
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "devpts",
    "mqueue",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "configfs",
    "pstore",
    "efivarfs",
    "fusectl",
    "binfmt_misc",
    "selinuxfs",
];

/// Why `src` is bound plainly under a user namespace, or `None` when it is
/// idmapped like any other bind.
pub fn plain_bind_reason(src: &Path) -> Option<String> {
    let meta = std::fs::metadata(src).ok()?;
    let ft = meta.file_type();
    if ft.is_char_device() || ft.is_block_device() {
        return Some("a device node".into());
    }
    let real = std::fs::canonicalize(src).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let fstype = fs_type_of(&mountinfo, &real)?;
    KERNEL_FS
        .contains(&fstype.as_str())
        .then(|| format!("on a kernel filesystem ({fstype})"))
}

/// The filesystem type of the mount holding `path` (canonical): the last
/// listed mount whose mount point is the longest prefix of it.
pub fn fs_type_of(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let point = unescape(point);
        if !path.starts_with(&point) {
            continue;
        }
        let len = point.len();
        if best.as_ref().is_none_or(|(l, _)| len >= *l) {
            best = Some((len, (*fstype).to_string()));
        }
    }
    best.map(|(_, t)| t)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
22 27 0:21 / /proc rw,relatime - proc proc rw
60 27 0:40 / /mnt/my\\040dir rw - ramfs ramfs rw
61 27 0:41 / /dev rw - tmpfs tmpfs rw
";

    #[test]
    fn the_longest_mount_point_wins_and_later_mounts_shadow() {
        let t = |p: &str| fs_type_of(MOUNTINFO, Path::new(p)).unwrap();
        assert_eq!(t("/proc/sys/kernel"), "proc");
        assert_eq!(t("/dev/shm/x"), "tmpfs");
        assert_eq!(
            t("/dev/fuse"),
            "tmpfs",
            "the later /dev mount shadows devtmpfs"
        );
        assert_eq!(t("/mnt/my dir/a"), "ramfs");
        assert_eq!(t("/mnt/my"), "ext4");
        assert_eq!(
            t("/devices"),
            "ext4",
            "a prefix of the string is not a parent dir"
        );
    }

    #[test]
    fn devices_and_kernel_filesystems_are_bound_plainly_here() {
        assert_eq!(
            plain_bind_reason(Path::new("/dev/null")).as_deref(),
            Some("a device node")
        );
        assert_eq!(
            plain_bind_reason(Path::new("/proc/sys")).as_deref(),
            Some("on a kernel filesystem (proc)")
        );
        assert!(plain_bind_reason(Path::new("/sys/kernel")).is_some_and(|r| r.contains("sysfs")));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(plain_bind_reason(dir.path()), None);
        assert_eq!(plain_bind_reason(&dir.path().join("missing")), None);
    }
}
