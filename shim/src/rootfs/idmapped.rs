//! The rootfs under a user namespace. An overlay cannot be idmapped whole
//! (the kernel refuses), so each lower layer is idmapped and the overlay is
//! assembled on top of them; the empty upper root is given to the mapped
//! root (one chown of one directory, never a recursive chown).

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use containerd_shim_protos::types::mount::Mount;
use nix::mount::{mount, umount2, MntFlags};

use super::RootfsError;
use crate::userns::{attach, idmapped_clone};

/// `uidmap=`/`gidmap=` of containerd's overlay: `ctr:host:size` ranges
/// (joined by `,`); container root must land on the pod's `host_root`.
fn check_remap(option: &str, ranges: &str, host_root: u32) -> Result<(), RootfsError> {
    let root = ranges.split(',').find_map(|r| {
        let mut f = r.split(':').map(str::parse::<u32>);
        match (f.next(), f.next(), f.next()) {
            (Some(Ok(0)), Some(Ok(host)), Some(Ok(size))) if size > 0 => Some(host),
            _ => None,
        }
    });
    if root != Some(host_root) {
        return Err(RootfsError::Unsupported(format!(
            "overlay option {option:?} does not map container root to the pod's host id {host_root}"
        )));
    }
    Ok(())
}

/// Mounts containerd's overlay at `<bundle>/rootfs` over idmapped lowers.
/// Returns the mount point. Nothing is left mounted on error.
pub fn overlay(
    bundle: &Path,
    m: &Mount,
    userns: BorrowedFd<'_>,
    host_root: u32,
) -> Result<PathBuf, RootfsError> {
    let mut lowers = Vec::new();
    let mut rest = Vec::new();
    let mut upper = None;
    for o in &m.options {
        if let Some(v) = o.strip_prefix("lowerdir=") {
            lowers.extend(v.split(':').map(PathBuf::from));
        } else if let Some(v) = o
            .strip_prefix("uidmap=")
            .or_else(|| o.strip_prefix("gidmap="))
        {
            // containerd 2.x's request to idmap the lowers (hostUsers: false),
            // which this does with the pod's namespace: the maps must agree.
            check_remap(o, v, host_root)?;
        } else {
            if let Some(v) = o.strip_prefix("upperdir=") {
                upper = Some(PathBuf::from(v));
            }
            rest.push(o.clone());
        }
    }
    if lowers.is_empty() {
        return Err(RootfsError::Unsupported(
            "overlay rootfs without lowerdir".into(),
        ));
    }
    let staged = stage_lowers(bundle, &lowers, userns)?;
    if let Some(id) = bundle.file_name().and_then(|n| n.to_str()) {
        crate::failpoint::hit("create:lowers", id);
    }
    let target = bundle.join("rootfs");
    let result = (|| {
        std::fs::create_dir_all(&target).map_err(|e| io_err("mkdir", &target, e))?;
        if let Some(up) = &upper {
            // A fresh snapshot's upper root belongs to host root; hand it to
            // the container's root so it can write at /.
            nix::unistd::chown(up, Some(host_root.into()), Some(host_root.into())).map_err(
                |source| RootfsError::Mount {
                    kind: "chown upper".into(),
                    target: up.display().to_string(),
                    source,
                },
            )?;
        }
        let lowerdir: Vec<String> = staged.iter().map(|p| p.display().to_string()).collect();
        let (flags, data) = super::parse_options(&rest);
        let data = if data.is_empty() {
            format!("lowerdir={}", lowerdir.join(":"))
        } else {
            format!("lowerdir={},{data}", lowerdir.join(":"))
        };
        mount(
            Some("overlay"),
            &target,
            Some("overlay"),
            flags,
            Some(data.as_str()),
        )
        .map_err(|source| RootfsError::Mount {
            kind: "overlay (idmapped lowers)".into(),
            target: target.display().to_string(),
            source,
        })
    })();
    unstage(&staged);
    result.map(|()| target)
}

/// Staging points of idmapped lowers: `<bundle>/.rund-lower-N`.
const STAGE_PREFIX: &str = ".rund-lower-";

/// Idmaps each lower layer and attaches it under `<bundle>/.rund-lower-N`.
fn stage_lowers(
    bundle: &Path,
    lowers: &[PathBuf],
    userns: BorrowedFd<'_>,
) -> Result<Vec<PathBuf>, RootfsError> {
    let mut staged = Vec::new();
    for (i, lower) in lowers.iter().enumerate() {
        let at = bundle.join(format!("{STAGE_PREFIX}{i}"));
        let step = (|| {
            std::fs::create_dir_all(&at).map_err(|e| io_err("mkdir", &at, e))?;
            let tree = idmapped_clone(lower, false, userns)
                .map_err(|e| RootfsError::Unsupported(e.to_string()))?;
            attach(std::os::fd::AsFd::as_fd(&tree), &at)
                .map_err(|e| RootfsError::Unsupported(e.to_string()))
        })();
        if let Err(e) = step {
            let _ = std::fs::remove_dir(&at);
            unstage(&staged);
            return Err(e);
        }
        staged.push(at);
    }
    Ok(staged)
}

/// The overlay keeps its own references to the lowers: detach and remove
/// the staging points.
fn unstage(staged: &[PathBuf]) {
    for at in staged {
        let _ = umount2(at, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(at);
    }
}

/// Detaches and removes staging points a shim that died mid-Create left.
pub fn unstage_all(bundle: &Path) {
    let Ok(rd) = std::fs::read_dir(bundle) else {
        return;
    };
    let staged: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(STAGE_PREFIX))
        .map(|e| e.path())
        .collect();
    for at in &staged {
        // Stacked attaches: peel them all.
        while umount2(at, MntFlags::MNT_DETACH).is_ok() {}
    }
    unstage(&staged);
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> RootfsError {
    RootfsError::Mount {
        kind: what.into(),
        target: p.display().to_string(),
        source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// True when containerd handed us an overlay rootfs.
pub fn is_overlay(mounts: &[Mount]) -> bool {
    mounts.len() == 1 && mounts[0].type_ == "overlay"
}

#[cfg(test)]
mod tests {
    use super::check_remap;

    #[test]
    fn containerd_remap_options_must_match_the_pod() {
        let ok = "0:1879048192:65536";
        assert!(check_remap("uidmap=..", ok, 1_879_048_192).is_ok());
        assert!(check_remap("uidmap=..", "1:5:1,0:7:10", 7).is_ok());
        let err = check_remap("uidmap=0:0:65536", "0:0:65536", 1_879_048_192).unwrap_err();
        assert!(err.to_string().contains("uidmap=0:0:65536"), "{err}");
        assert!(check_remap("gidmap=x", "x", 7).is_err());
    }
}
