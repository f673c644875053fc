//! OCI `mounts`: planning (pure, here) and carrying out (`mounter.rs`).

use std::path::PathBuf;

use nix::errno::Errno;
use nix::mount::MsFlags;
use oci_spec::runtime::Mount;

use super::options::{parse, MountOptions};
use super::paths::is_root;

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount {index} ({dest}): destination must be an absolute path")]
    Relative { index: usize, dest: String },
    #[error("mount {index} ({dest}): no type given and not a bind mount")]
    NoType { index: usize, dest: String },
    #[error("mount {index} ({dest}): a bind mount needs its source as an fd (FdKind::Mount({index})), none was passed")]
    NoFd { index: usize, dest: String },
    #[error("mount {index} ({dest}): the destination is the container's root; mount onto a directory inside it")]
    OnRoot { index: usize, dest: String },
    #[error("mount {index} ({dest}): propagation {opt:?} cannot be honoured in a user namespace: mounts made in the container would propagate to the host's mount namespace; run the pod without a user namespace (rund.io/userns: host) for bidirectional mount propagation")]
    SharedInUserns {
        index: usize,
        dest: String,
        opt: &'static str,
    },
    #[error("mount {index} ({dest}): a cgroup v1 mount must arrive as binds of the container's own cgroup (the shim expands it); refusing to show the host's whole hierarchy")]
    CgroupV1 { index: usize, dest: String },
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
    pub fn fstype(&self) -> String {
        match &self.kind {
            Kind::Bind => "bind".into(),
            Kind::Cgroup => "cgroup".into(),
            Kind::Fs { fstype, .. } => fstype.clone(),
        }
    }
    pub fn err(&self, op: &'static str, errno: Errno) -> MountError {
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

/// Turns `spec.mounts` into steps, in order. In a user namespace
/// (`userns`) shared propagation is refused: it would reach the host.
pub fn plan(mounts: &[Mount], userns: bool) -> Result<Vec<Step>, MountError> {
    let mut steps = Vec::with_capacity(mounts.len());
    for (index, m) in mounts.iter().enumerate() {
        let dest = m.destination().clone();
        let d = || dest.display().to_string();
        if !dest.is_absolute() {
            return Err(MountError::Relative { index, dest: d() });
        }
        if is_root(&dest) {
            return Err(MountError::OnRoot { index, dest: d() });
        }
        let opts = parse(m.options().as_deref().unwrap_or_default());
        if userns {
            if let Some(p) = opts
                .propagation
                .iter()
                .find(|p| p.contains(MsFlags::MS_SHARED))
            {
                let opt = if p.contains(MsFlags::MS_REC) {
                    "rshared"
                } else {
                    "shared"
                };
                return Err(MountError::SharedInUserns {
                    index,
                    dest: d(),
                    opt,
                });
            }
        }
        let typ = m.typ().clone().unwrap_or_default();
        let bind = rund_sys::mount::is_bind(
            m.typ().as_deref(),
            m.options().as_deref().unwrap_or_default(),
        );
        let (kind, point) = if bind {
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
