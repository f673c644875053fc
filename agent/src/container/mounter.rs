//! Carrying out the planned mounts, each onto an fd resolved beneath the
//! rootfs: binds arrive as detached trees and are moved onto it,
//! filesystems are made with fsopen/fsmount and moved onto it.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::mount::MsFlags;
use nix::sys::stat::SFlag;

use super::mounts::{parse_cgroups, Kind, MountError, Step};
use super::paths::Create;
use super::propagation::RootPropagation;
use crate::sys::Syscall;

/// Everything carrying out the steps needs.
pub struct MountCtx<'a> {
    pub sys: &'a dyn Syscall,
    /// The container rootfs (attached in the container's mount ns).
    pub root: BorrowedFd<'a>,
    /// `FdKind::Mount(i)` fds.
    pub fds: &'a HashMap<usize, OwnedFd>,
    /// Contents of /proc/self/cgroup, to tell v1 from v2.
    pub cgroups: &'a str,
    pub propagation: RootPropagation,
    /// The sandbox has a user namespace: trees never stay host peers.
    pub userns: bool,
}

/// What the later steps need from the mounts.
#[derive(Debug, Default)]
pub struct Applied {
    /// A tmpfs now sits on /dev.
    pub dev_tmpfs: bool,
    /// Mounts asked to be read-only but kept writable until the container
    /// is built (tmpfs and /dev, as runc does: /dev gets device nodes).
    pub read_only_later: Vec<OwnedFd>,
}

impl<'a> MountCtx<'a> {
    /// Carries out `steps` in order.
    pub fn apply(&self, steps: &[Step]) -> Result<Applied, MountError> {
        let mut out = Applied::default();
        for step in steps {
            match &step.kind {
                Kind::Bind => {
                    let fd = self.bind(step)?;
                    self.mount_propagation(step, fd)?;
                }
                Kind::Cgroup => {
                    let mnt = self.cgroup(step)?;
                    self.mount_propagation(step, mnt.as_fd())?;
                }
                Kind::Fs { fstype, source } => {
                    let is_dev = super::paths::clean(&step.dest) == Path::new("/dev");
                    let (mnt, later) = self.fs(step, fstype, source, is_dev)?;
                    out.dev_tmpfs |= is_dev && fstype == "tmpfs";
                    self.mount_propagation(step, mnt.as_fd())?;
                    if later {
                        out.read_only_later.push(mnt);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The mount's own propagation options, in order.
    fn mount_propagation(&self, step: &Step, mnt: BorrowedFd<'_>) -> Result<(), MountError> {
        for p in &step.opts.propagation {
            self.sys
                .set_propagation(mnt, *p)
                .map_err(|e| step.err("set propagation", e))?;
        }
        Ok(())
    }

    /// Resolves a destination beneath the root, refusing the root itself
    /// (a symlink to "/" would put the mount over the whole rootfs).
    fn target(&self, step: &Step, create: Create) -> Result<OwnedFd, MountError> {
        let t = self
            .sys
            .resolve(self.root, &step.dest, create)
            .map_err(|e| step.err("resolve destination in the rootfs", e))?;
        if self
            .sys
            .same_file(t.as_fd(), self.root)
            .map_err(|e| step.err("stat destination", e))?
        {
            return Err(MountError::OnRoot {
                index: step.index,
                dest: step.dest.display().to_string(),
            });
        }
        Ok(t)
    }

    /// Prepares an attached tree the shim cloned from the host (the rootfs
    /// or a bind): never a host peer in a user namespace, then the
    /// rootfsPropagation value as runc's binds would inherit it.
    pub fn tree_propagation(
        &self,
        mnt: BorrowedFd<'_>,
        how: Option<MsFlags>,
    ) -> Result<(), nix::errno::Errno> {
        if self.userns {
            self.sys
                .set_propagation(mnt, MsFlags::MS_SLAVE | MsFlags::MS_REC)?;
        }
        if let Some(how) = how {
            self.sys.set_propagation(mnt, how)?;
        }
        Ok(())
    }

    fn bind(&self, step: &Step) -> Result<BorrowedFd<'a>, MountError> {
        let fd = self.fds.get(&step.index).ok_or(MountError::NoFd {
            index: step.index,
            dest: step.dest.display().to_string(),
        })?;
        let (kind, _) = self
            .sys
            .stat(fd.as_fd())
            .map_err(|e| step.err("stat bind source", e))?;
        let create = if kind == SFlag::S_IFDIR {
            Create::Dir
        } else {
            Create::File
        };
        let target = self.target(step, create)?;
        self.sys
            .move_mount(fd.as_fd(), target.as_fd())
            .map_err(|e| step.err("move_mount", e))?;
        self.tree_propagation(fd.as_fd(), self.propagation.for_bind())
            .map_err(|e| step.err("set propagation", e))?;
        let o = &step.opts;
        if o.attr_set != 0 || o.attr_clr != 0 {
            self.sys
                .set_attr(fd.as_fd(), o.attr_set, o.attr_clr, false)
                .map_err(|e| step.err("mount_setattr", e))?;
        }
        if o.rattr_set != 0 || o.rattr_clr != 0 {
            self.sys
                .set_attr(fd.as_fd(), o.rattr_set, o.rattr_clr, true)
                .map_err(|e| step.err("mount_setattr (recursive)", e))?;
        }
        Ok(fd.as_fd())
    }

    /// A new filesystem. Returns its mount and whether it is to be made
    /// read-only once the container is built.
    fn fs(
        &self,
        step: &Step,
        fstype: &str,
        source: &str,
        is_dev: bool,
    ) -> Result<(OwnedFd, bool), MountError> {
        let mut data = step.opts.data_string();
        let target = match self.target(step, Create::No) {
            Ok(t) => {
                // runc: a tmpfs over an existing dir keeps the dir's mode.
                let has_mode = step.opts.data.iter().any(|d| d.starts_with("mode="));
                if fstype == "tmpfs" && !has_mode {
                    let (_, mode) = self
                        .sys
                        .stat(t.as_fd())
                        .map_err(|e| step.err("stat destination", e))?;
                    let m = format!("mode={mode:04o}");
                    data = Some(data.map_or(m.clone(), |d| format!("{m},{d}")));
                }
                t
            }
            Err(MountError::Sys {
                errno: nix::errno::Errno::ENOENT,
                ..
            }) => self.target(step, Create::Dir)?,
            Err(e) => return Err(e),
        };
        let mut flags = step.opts.flags;
        let later = (fstype == "tmpfs" || is_dev) && flags.contains(MsFlags::MS_RDONLY);
        if later {
            flags.remove(MsFlags::MS_RDONLY);
        }
        let mnt = self
            .sys
            .fs_mount(fstype, source, flags, data.as_deref())
            .map_err(|e| step.err("mount", e))?;
        self.sys
            .move_mount(mnt.as_fd(), target.as_fd())
            .map_err(|e| step.err("move_mount", e))?;
        Ok((mnt, later))
    }

    /// cgroup v2: a fresh cgroup2 mount, which shows the container's own
    /// subtree when it has a cgroup namespace rooted at its cgroup. cgroup
    /// v1 mounts are expanded by the shim into binds of the container's own
    /// cgroup dirs; one reaching here would show the host's whole tree.
    fn cgroup(&self, step: &Step) -> Result<OwnedFd, MountError> {
        let v1 = parse_cgroups(self.cgroups).iter().any(|h| !h.is_empty());
        if v1 {
            return Err(MountError::CgroupV1 {
                index: step.index,
                dest: step.dest.display().to_string(),
            });
        }
        let target = self.target(step, Create::Dir)?;
        let data = step.opts.data_string();
        let mnt = self
            .sys
            .fs_mount("cgroup2", "cgroup2", step.opts.flags, data.as_deref())
            .map_err(|e| step.err("mount cgroup2", e))?;
        self.sys
            .move_mount(mnt.as_fd(), target.as_fd())
            .map_err(|e| step.err("move_mount", e))?;
        Ok(mnt)
    }
}
