//! Identity changes: groups, gid, uid (keeping capabilities across setuid).

use nix::errno::Errno;
// Per-thread calls: this runs in a child of a raw clone3 (see rund_sys::creds).
use rund_sys::creds::{setgroups, setresgid, setresuid};

#[derive(Debug, thiserror::Error)]
#[error("{op}: {errno}")]
pub struct UserError {
    pub op: String,
    pub errno: Errno,
}

/// setgroups, setresgid, PR_SET_KEEPCAPS, setresuid.
pub fn switch(uid: u32, gid: u32, groups: &[u32]) -> Result<(), UserError> {
    match setgroups(groups) {
        // "setgroups deny" in a user namespace: only an empty list was wanted anyway.
        Err(Errno::EPERM) if groups.is_empty() => {}
        Err(errno) => {
            return Err(UserError {
                op: format!("setgroups {groups:?}"),
                errno,
            })
        }
        Ok(()) => {}
    }
    setresgid(gid).map_err(|errno| UserError {
        op: format!("setresgid {gid}"),
        errno,
    })?;
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) };
    Errno::result(r).map_err(|errno| UserError {
        op: "prctl(PR_SET_KEEPCAPS)".into(),
        errno,
    })?;
    setresuid(uid).map_err(|errno| UserError {
        op: format!("setresuid {uid}"),
        errno,
    })?;
    // SAFETY: as above.
    let _ = unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) };
    Ok(())
}

pub fn no_new_privs() -> Result<(), UserError> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    Errno::result(r).map(drop).map_err(|errno| UserError {
        op: "prctl(PR_SET_NO_NEW_PRIVS)".into(),
        errno,
    })
}

#[derive(Debug, thiserror::Error)]
#[error("failed to set oom_score_adj to {value} (/proc/self/oom_score_adj): {source}{}", oom_hint(.source))]
pub struct OomScoreAdjError {
    pub value: i32,
    pub source: std::io::Error,
}

fn oom_hint(e: &std::io::Error) -> &'static str {
    if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
        ": lowering oom_score_adj needs CAP_SYS_RESOURCE, which this node's runtime lacks; with CRI set \
         `restrict_oom_score_adj = true` in containerd's config, under [plugins.\"io.containerd.grpc.v1.cri\"] \
         (containerd 1.x) or [plugins.\"io.containerd.cri.v1.runtime\"] (2.x)"
    } else {
        ""
    }
}

/// Writes /proc/self/oom_score_adj (inherited by children and across exec).
pub fn oom_score_adj(value: i32) -> Result<(), OomScoreAdjError> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
        .map_err(|source| OomScoreAdjError { value, source })
}
