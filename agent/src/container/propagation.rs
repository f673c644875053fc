//! `linux.rootfsPropagation`, applied as runc applies it.
//!
//! runc builds a container from a copy of the host's mounts: before any
//! mount it sets the value (default rslave) on "/" of that copy, so every
//! bind it makes inherits it; only a shared or unbindable value is applied
//! again to the container's "/" after pivot_root, and the rootfs itself is
//! made private first (its parent mount must not be shared). rund builds a
//! container from detached trees the shim cloned (the rootfs and one per
//! bind, each still a peer of the host mount it came from), so the value is
//! set on each tree as it is attached, and after pivot_root on "/".
//!
//! In a user namespace the trees are always made slaves first: a mount
//! made inside must never propagate back to the host (the kernel turns
//! shared into slave for namespaces copied across user namespaces; rund's
//! trees are not copies, so rund does it), and shared values are refused.

use nix::mount::MsFlags;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PropagationError {
    #[error("linux.rootfsPropagation {0:?} is not one of private, rprivate, slave, rslave, shared, rshared, unbindable, runbindable")]
    Unknown(String),
    #[error("linux.rootfsPropagation {0:?} cannot be honoured in a user namespace: mounts made in the container would propagate to the host's mount namespace (the kernel makes them slaves there); run the pod without a user namespace (rund.io/userns: host) for bidirectional mount propagation")]
    SharedInUserns(String),
}

/// The parsed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootPropagation(MsFlags);

impl RootPropagation {
    /// runc's default when the spec sets none.
    pub const DEFAULT: RootPropagation = RootPropagation(MsFlags::MS_SLAVE.union(MsFlags::MS_REC));

    pub fn parse(value: Option<&str>, userns: bool) -> Result<Self, PropagationError> {
        let v = match value {
            None | Some("") => return Ok(Self::DEFAULT),
            Some(v) => v,
        };
        let flags = super::options::propagation(v)
            .ok_or_else(|| PropagationError::Unknown(v.to_string()))?;
        if userns && flags.contains(MsFlags::MS_SHARED) {
            return Err(PropagationError::SharedInUserns(v.to_string()));
        }
        Ok(RootPropagation(flags))
    }

    fn keeps_host_peers(self) -> bool {
        self.0
            .intersects(MsFlags::MS_SHARED | MsFlags::MS_UNBINDABLE)
    }

    /// Set on a bind tree right after it is attached (runc: inherited from
    /// the "/" it set before mounting); `None` keeps the tree's sharing.
    pub fn for_bind(self) -> Option<MsFlags> {
        (!self.keeps_host_peers()).then_some(self.0)
    }

    /// Set on the rootfs tree once attached: the value itself, or private
    /// when "/" gets a shared or unbindable value after pivot_root (runc
    /// makes the rootfs private so it never joins the host's peer group).
    pub fn for_rootfs(self) -> MsFlags {
        if self.keeps_host_peers() {
            MsFlags::MS_PRIVATE
        } else {
            self.0
        }
    }

    /// Set on the container's "/" after pivot_root, if anything.
    pub fn after_pivot(self) -> Option<MsFlags> {
        self.keeps_host_peers().then_some(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_rslave_and_values_map_as_in_runc() {
        let p = |v: Option<&str>| RootPropagation::parse(v, false).unwrap();
        assert_eq!(p(None).0, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        assert_eq!(p(Some("")).0, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        let rshared = p(Some("rshared"));
        assert_eq!(rshared.for_bind(), None);
        assert_eq!(rshared.for_rootfs(), MsFlags::MS_PRIVATE);
        assert_eq!(
            rshared.after_pivot(),
            Some(MsFlags::MS_SHARED | MsFlags::MS_REC)
        );
        let private = p(Some("private"));
        assert_eq!(private.for_bind(), Some(MsFlags::MS_PRIVATE));
        assert_eq!(private.for_rootfs(), MsFlags::MS_PRIVATE);
        assert_eq!(private.after_pivot(), None);
        assert_eq!(
            p(Some("runbindable")).after_pivot(),
            Some(MsFlags::MS_UNBINDABLE | MsFlags::MS_REC)
        );
    }

    #[test]
    fn unknown_and_shared_in_userns_are_refused() {
        assert_eq!(
            RootPropagation::parse(Some("rsharedd"), false),
            Err(PropagationError::Unknown("rsharedd".into()))
        );
        let e = RootPropagation::parse(Some("rshared"), true).unwrap_err();
        assert!(e.to_string().contains("user namespace"), "{e}");
        assert!(RootPropagation::parse(Some("rslave"), true).is_ok());
    }
}
