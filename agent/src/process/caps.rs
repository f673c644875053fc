//! The five capability sets of `process.capabilities`, applied with `caps`.

use caps::{CapSet, Capability, CapsHashSet};
use oci_spec::runtime::{Capabilities, LinuxCapabilities};

#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    #[error("unknown capability {0:?}")]
    Unknown(String),
    #[error("setting the {set} capability set: {source}")]
    Set {
        set: &'static str,
        source: caps::errors::CapsError,
    },
}

/// The sets to apply. As runc does, an absent `process.capabilities`, or an
/// absent set in it, means an empty set: a spec that drops ALL (containerd
/// then leaves the sets out) gets no capability at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapPlan {
    pub bounding: CapsHashSet,
    pub effective: CapsHashSet,
    pub permitted: CapsHashSet,
    pub inheritable: CapsHashSet,
    pub ambient: CapsHashSet,
}

fn convert(set: &Option<Capabilities>) -> Result<CapsHashSet, CapsError> {
    let mut out = CapsHashSet::new();
    for c in set.iter().flatten() {
        let name = format!("CAP_{c}");
        // oci-spec names every capability; the caps crate must know it too.
        match name.parse::<Capability>() {
            Ok(cap) => {
                out.insert(cap);
            }
            Err(_) => return Err(CapsError::Unknown(name)),
        }
    }
    Ok(out)
}

pub fn plan(c: Option<&LinuxCapabilities>) -> Result<CapPlan, CapsError> {
    let Some(c) = c else {
        return Ok(CapPlan::default());
    };
    Ok(CapPlan {
        bounding: convert(c.bounding())?,
        effective: convert(c.effective())?,
        permitted: convert(c.permitted())?,
        inheritable: convert(c.inheritable())?,
        ambient: convert(c.ambient())?,
    })
}

/// Drops from the bounding set what the plan does not keep. Runs while still
/// root (needs CAP_SETPCAP), before the uid change.
pub fn drop_bounding(p: &CapPlan) -> Result<(), CapsError> {
    let keep = &p.bounding;
    let known = caps::runtime::procfs_all_supported(None).unwrap_or_else(|_| caps::all());
    for cap in known.difference(keep) {
        caps::drop(None, CapSet::Bounding, *cap).map_err(|source| CapsError::Set {
            set: "bounding",
            source,
        })?;
    }
    Ok(())
}

/// Sets inheritable, effective, permitted, then ambient (after the uid
/// change, with PR_SET_KEEPCAPS having kept the permitted set). The order
/// matters: capset(2) refuses an effective set that is not within the
/// permitted one, and a new inheritable set needs CAP_SETPCAP in effective.
pub fn apply_sets(p: &CapPlan) -> Result<(), CapsError> {
    caps::set(None, CapSet::Inheritable, &p.inheritable).map_err(|source| CapsError::Set {
        set: "inheritable",
        source,
    })?;
    caps::set(None, CapSet::Effective, &p.effective).map_err(|source| CapsError::Set {
        set: "effective",
        source,
    })?;
    caps::set(None, CapSet::Permitted, &p.permitted).map_err(|source| CapsError::Set {
        set: "permitted",
        source,
    })?;
    caps::clear(None, CapSet::Ambient).map_err(|source| CapsError::Set {
        set: "ambient",
        source,
    })?;
    for cap in &p.ambient {
        caps::raise(None, CapSet::Ambient, *cap).map_err(|source| CapsError::Set {
            set: "ambient",
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_names_map_to_caps() {
        let c: LinuxCapabilities = serde_json::from_str(
            r#"{"bounding":["CAP_CHOWN","CAP_NET_BIND_SERVICE"],"effective":["CAP_CHOWN"],"permitted":["CAP_CHOWN"],"ambient":["CAP_SYS_ADMIN"]}"#,
        )
        .unwrap();
        let p = plan(Some(&c)).unwrap();
        assert_eq!(
            p.bounding,
            [Capability::CAP_CHOWN, Capability::CAP_NET_BIND_SERVICE].into()
        );
        assert_eq!(p.effective, [Capability::CAP_CHOWN].into());
        assert_eq!(p.ambient, [Capability::CAP_SYS_ADMIN].into());
        assert!(p.inheritable.is_empty());
    }

    #[test]
    fn absent_capabilities_or_sets_mean_empty() {
        assert_eq!(plan(None).unwrap(), CapPlan::default());
        let c: LinuxCapabilities = serde_json::from_str(r#"{"effective":["CAP_KILL"]}"#).unwrap();
        let p = plan(Some(&c)).unwrap();
        assert!(p.bounding.is_empty() && p.permitted.is_empty());
        assert_eq!(p.effective, [Capability::CAP_KILL].into());
    }
}
