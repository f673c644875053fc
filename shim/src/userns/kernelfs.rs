//! Bind sources that are never idmapped: device nodes (as `linux.devices`
//! under a user namespace) and anything on a kernel filesystem (devtmpfs,
//! proc, sysfs, cgroup, ...). The kernel refuses idmapped mounts there, and
//! their ownership means nothing to the container anyway; they are bound
//! plainly, as runc binds them.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Filesystems without idmapped-mount support whose files the kernel, not
/// a disk, provides, by their statfs(2) magic. devtmpfs has tmpfs's (or
/// ramfs's) magic and is told apart by its device (see [`kernel_fs`]).
const KERNEL_FS: [(u64, &str); 16] = [
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x1cd1, "devpts"),
    (0x1980_0202, "mqueue"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0x6573_5543, "fusectl"),
    (0x4249_4e4d, "binfmt_misc"),
    (0xf97c_ff8c, "selinuxfs"),
];
const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;

/// Why `src` is bound plainly under a user namespace, or `None` when it is
/// idmapped like any other bind. From stat and statfs alone: reading
/// mountinfo would wait on the kernel's global mount lock behind every
/// mount being made on the node.
pub fn plain_bind_reason(src: &Path) -> Option<String> {
    let meta = std::fs::metadata(src).ok()?;
    let ft = meta.file_type();
    if ft.is_char_device() || ft.is_block_device() {
        return Some("a device node".into());
    }
    let magic = nix::sys::statfs::statfs(src).ok()?.filesystem_type().0 as u64;
    let dev_dir = std::fs::metadata("/dev").ok().map(|m| m.dev());
    kernel_fs(magic, meta.dev(), dev_dir).map(|t| format!("on a kernel filesystem ({t})"))
}

/// The kernel filesystem with this statfs `magic` holding a file on device
/// `dev`. A tmpfs or ramfs is devtmpfs when it is the filesystem of /dev
/// (`dev_dir`, the host's devtmpfs): its files are device nodes and
/// directories of them, bound plainly as runc binds them.
fn kernel_fs(magic: u64, dev: u64, dev_dir: Option<u64>) -> Option<&'static str> {
    if let Some((_, name)) = KERNEL_FS.iter().find(|(m, _)| *m == magic) {
        return Some(name);
    }
    ((magic == TMPFS_MAGIC || magic == RAMFS_MAGIC) && dev_dir == Some(dev)).then_some("devtmpfs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_names_the_filesystem_and_only_dev_s_tmpfs_is_devtmpfs() {
        assert_eq!(kernel_fs(0x9fa0, 5, Some(6)), Some("proc"));
        assert_eq!(kernel_fs(0x6367_7270, 5, Some(6)), Some("cgroup2"));
        assert_eq!(kernel_fs(TMPFS_MAGIC, 6, Some(6)), Some("devtmpfs"));
        assert_eq!(kernel_fs(RAMFS_MAGIC, 6, Some(6)), Some("devtmpfs"));
        assert_eq!(kernel_fs(TMPFS_MAGIC, 27, Some(6)), None, "another tmpfs");
        assert_eq!(kernel_fs(TMPFS_MAGIC, 6, None), None);
        assert_eq!(kernel_fs(0xef53, 6, Some(6)), None, "a disk filesystem");
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
        assert_eq!(
            plain_bind_reason(Path::new("/dev")).as_deref(),
            Some("on a kernel filesystem (devtmpfs)")
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(plain_bind_reason(dir.path()), None);
        assert_eq!(plain_bind_reason(&dir.path().join("missing")), None);
    }
}
