//! OCI `mounts`: planning (pure) and carrying out (through the syscall seam).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use oci_spec::runtime::Mount;

use super::options::{parse, MountOptions};
use super::paths::secure_join;
use crate::sys::raw::MOUNT_ATTR_RDONLY;
use crate::sys::Syscall;

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount {index} ({dest}): destination must be an absolute path")]
    Relative { index: usize, dest: String },
    #[error("mount {index} ({dest}): no type given and not a bind mount")]
    NoType { index: usize, dest: String },
    #[error("mount {index} ({dest}): a bind mount needs its source as an fd (FdKind::Mount({index})), none was passed")]
    NoFd { index: usize, dest: String },
    #[error("mount {index} ({dest}, type {fstype}): {op} failed: {errno}{hint}")]
    Sys {
        index: usize,
        dest: String,
        fstype: String,
        op: &'static str,
        errno: Errno,
        hint: &'static str,
    },
}

/// What sits at the mount point before mounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountPoint {
    Dir,
    /// A dir or a file, whichever the bind source is.
    LikeSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A bind mount whose source arrives as a detached mount fd.
    Bind,
    /// A cgroup mount: laid out after the agent's own cgroup hierarchies.
    Cgroup,
    /// Any other filesystem, mounted by type.
    Fs { fstype: String, source: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub index: usize,
    pub dest: PathBuf,
    pub kind: Kind,
    pub point: MountPoint,
    pub opts: MountOptions,
}

impl Step {
    fn fstype(&self) -> String {
        match &self.kind {
            Kind::Bind => "bind".into(),
            Kind::Cgroup => "cgroup".into(),
            Kind::Fs { fstype, .. } => fstype.clone(),
        }
    }
    fn err(&self, op: &'static str, errno: Errno) -> MountError {
        let hint = match (&self.kind, errno) {
            (Kind::Fs { fstype, .. }, Errno::EPERM) if fstype == "sysfs" => {
                " (the kernel refuses a new sysfs when the network namespace is not owned by the sandbox's user namespace; give the container its own netns or drop the /sys mount)"
            }
            (Kind::Fs { fstype, .. }, Errno::EPERM) if fstype == "mqueue" => {
                " (mqueue needs an ipc namespace owned by the sandbox's user namespace)"
            }
            _ => "",
        };
        MountError::Sys {
            index: self.index,
            dest: self.dest.display().to_string(),
            fstype: self.fstype(),
            op,
            errno,
            hint,
        }
    }
}

/// Turns `spec.mounts` into steps, in order.
pub fn plan(mounts: &[Mount]) -> Result<Vec<Step>, MountError> {
    let mut steps = Vec::with_capacity(mounts.len());
    for (index, m) in mounts.iter().enumerate() {
        let dest = m.destination().clone();
        let d = || dest.display().to_string();
        if !dest.is_absolute() {
            return Err(MountError::Relative { index, dest: d() });
        }
        let opts = parse(m.options().as_deref().unwrap_or_default());
        let typ = m.typ().clone().unwrap_or_default();
        let (kind, point) = if opts.bind || typ == "bind" {
            (Kind::Bind, MountPoint::LikeSource)
        } else if typ.is_empty() || typ == "none" {
            return Err(MountError::NoType { index, dest: d() });
        } else if typ == "cgroup" || typ == "cgroup2" {
            (Kind::Cgroup, MountPoint::Dir)
        } else {
            let source = m
                .source()
                .as_ref()
                .map(|s| s.display().to_string())
                .unwrap_or_else(|| typ.clone());
            (
                Kind::Fs {
                    fstype: typ,
                    source,
                },
                MountPoint::Dir,
            )
        };
        steps.push(Step {
            index,
            dest,
            kind,
            point,
            opts,
        });
    }
    Ok(steps)
}

/// Everything carrying out the steps needs.
pub struct MountCtx<'a> {
    pub sys: &'a dyn Syscall,
    /// Where the container rootfs is attached (in the container's mount ns).
    pub root: &'a Path,
    /// `FdKind::Mount(i)` fds.
    pub fds: &'a HashMap<usize, OwnedFd>,
    /// Contents of /proc/self/cgroup, to lay out cgroup mounts.
    pub cgroups: &'a str,
}

impl MountCtx<'_> {
    pub fn target(&self, dest: &Path) -> Result<PathBuf, Errno> {
        secure_join(self.root, dest)
    }

    /// Carries out `steps` in order. Returns whether a tmpfs now sits on /dev.
    pub fn apply(&self, steps: &[Step]) -> Result<bool, MountError> {
        let mut dev_tmpfs = false;
        for step in steps {
            let target = self
                .target(&step.dest)
                .map_err(|e| step.err("resolve destination", e))?;
            match &step.kind {
                Kind::Bind => self.bind(step, &target)?,
                Kind::Cgroup => self.cgroup(step, &target)?,
                Kind::Fs { fstype, source } => {
                    self.sys
                        .mkdir_all(&target)
                        .map_err(|e| step.err("mkdir", e))?;
                    let data = step.opts.data_string();
                    self.sys
                        .mount(
                            Some(source),
                            &target,
                            Some(fstype),
                            step.opts.flags,
                            data.as_deref(),
                        )
                        .map_err(|e| step.err("mount", e))?;
                    dev_tmpfs |= fstype == "tmpfs" && step.dest == Path::new("/dev");
                }
            }
            for p in &step.opts.propagation {
                self.sys
                    .mount(None, &target, None, *p, None)
                    .map_err(|e| step.err("set propagation", e))?;
            }
        }
        Ok(dev_tmpfs)
    }

    fn bind(&self, step: &Step, target: &Path) -> Result<(), MountError> {
        let dest = step.dest.display().to_string();
        let fd = self.fds.get(&step.index).ok_or(MountError::NoFd {
            index: step.index,
            dest,
        })?;
        if self.sys.fd_is_dir(fd.as_fd()) {
            self.sys
                .mkdir_all(target)
                .map_err(|e| step.err("mkdir", e))?;
        } else {
            self.sys
                .touch(target)
                .map_err(|e| step.err("create file mount point", e))?;
        }
        self.sys
            .move_mount(fd.as_fd(), target)
            .map_err(|e| step.err("move_mount", e))?;
        if step.opts.attr_set != 0 || step.opts.attr_clr != 0 {
            self.sys
                .mount_setattr(
                    target,
                    step.opts.attr_set,
                    step.opts.attr_clr,
                    step.opts.recursive,
                )
                .map_err(|e| step.err("mount_setattr", e))?;
        }
        Ok(())
    }

    fn cgroup(&self, step: &Step, target: &Path) -> Result<(), MountError> {
        let flags = step.opts.flags;
        self.sys
            .mkdir_all(target)
            .map_err(|e| step.err("mkdir", e))?;
        let hierarchies = parse_cgroups(self.cgroups);
        if hierarchies.iter().all(|h| h.is_empty()) {
            return self
                .sys
                .mount(Some("cgroup2"), target, Some("cgroup2"), flags, None)
                .map_err(|e| step.err("mount cgroup2", e));
        }
        // cgroup v1 (or hybrid): a tmpfs holding one mount per hierarchy.
        let tmp_flags = flags - MsFlags::MS_RDONLY;
        self.sys
            .mount(
                Some("tmpfs"),
                target,
                Some("tmpfs"),
                tmp_flags,
                Some("mode=755"),
            )
            .map_err(|e| step.err("mount tmpfs", e))?;
        for h in &hierarchies {
            let (dir, fstype, data) = if h.is_empty() {
                ("unified".to_string(), "cgroup2", None)
            } else if let Some(name) = h.strip_prefix("name=") {
                (name.to_string(), "cgroup", Some(format!("none,{h}")))
            } else {
                (h.clone(), "cgroup", Some(h.clone()))
            };
            let sub = target.join(&dir);
            self.sys.mkdir_all(&sub).map_err(|e| step.err("mkdir", e))?;
            self.sys
                .mount(Some("cgroup"), &sub, Some(fstype), flags, data.as_deref())
                .map_err(|e| step.err("mount cgroup hierarchy", e))?;
            if h.contains(',') {
                for c in h.split(',').filter(|c| !c.starts_with("name=")) {
                    self.sys
                        .symlink(&dir, &target.join(c))
                        .map_err(|e| step.err("symlink", e))?;
                }
            }
        }
        if flags.contains(MsFlags::MS_RDONLY) {
            self.sys
                .mount_setattr(target, MOUNT_ATTR_RDONLY, 0, false)
                .map_err(|e| step.err("mount_setattr", e))?;
        }
        Ok(())
    }
}

/// The controller lists of /proc/self/cgroup ("" for the v2 hierarchy).
pub fn parse_cgroups(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(str::to_string)
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
#[path = "mounts_tests.rs"]
mod tests;
