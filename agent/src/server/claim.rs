//! ClaimSandbox: a warm agent becomes one pod's sandbox. It was launched
//! before the pod existed, in new pid, ipc, uts and mount namespaces (and a
//! new network namespace for a head start whose pod wants one); what only
//! the pod can say comes now: its network namespace (joined, or made),
//! its hostname and its sysctls. The agent is single-threaded here (a
//! current-thread runtime), so the setns holds for every process it starts.

use std::os::fd::AsFd;

use nix::sched::{setns, unshare, CloneFlags};
use rund_proto::fdpass::FdKind;
use rund_proto::ClaimSandboxRequest;

use super::{err, AgentService};

/// Whether this agent may still be claimed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Warmth {
    /// Launched for one pod: nothing to claim.
    #[default]
    Cold,
    Waiting,
    Claimed,
}

pub async fn sandbox(svc: &AgentService, req: ClaimSandboxRequest) -> ttrpc::Result<()> {
    {
        let mut w = svc.warmth.lock().unwrap_or_else(|e| e.into_inner());
        match *w {
            Warmth::Waiting => *w = Warmth::Claimed,
            Warmth::Cold => {
                return Err(err(
                    ttrpc::Code::FAILED_PRECONDITION,
                    "this agent was launched for its pod: there is nothing to claim",
                ))
            }
            Warmth::Claimed => {
                return Err(err(
                    ttrpc::Code::FAILED_PRECONDITION,
                    "this warm agent is already claimed",
                ))
            }
        }
    }
    let bad = |m: String| err(ttrpc::Code::INVALID_ARGUMENT, m);
    let failed = |m: String| err(ttrpc::Code::FAILED_PRECONDITION, m);
    let id = &req.sandbox_id;
    if req.fd_seq != 0 {
        if req.new_net {
            return Err(bad(format!(
                "sandbox {id}: a network namespace to join and a new one"
            )));
        }
        let (kinds, fds) = svc
            .fdpass
            .take(req.fd_seq)
            .await
            .map_err(|e| bad(format!("sandbox {id}: {e}")))?;
        match (kinds.as_slice(), fds.as_slice()) {
            ([FdKind::Namespace(n)], [fd]) if n == "net" => {
                setns(fd.as_fd(), CloneFlags::CLONE_NEWNET)
                    .map_err(|e| failed(format!("sandbox {id}: setns net: {e}")))?;
            }
            _ => {
                return Err(bad(format!(
                    "sandbox {id}: the claim's fds must be one net namespace, not {kinds:?}"
                )))
            }
        }
    } else if req.new_net {
        unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| failed(format!("sandbox {id}: unshare net: {e}")))?;
    }
    if !req.hostname.is_empty() {
        nix::unistd::sethostname(&req.hostname)
            .map_err(|e| failed(format!("sandbox {id}: sethostname {:?}: {e}", req.hostname)))?;
    }
    let sysctls: Vec<(String, String)> = req
        .sysctls
        .iter()
        .map(|s| (s.key.clone(), s.value.clone()))
        .collect();
    // No user namespace: every key of the pod's namespaces, checked as at
    // launch (a key of a namespace the host owns is refused there).
    crate::launch::sysctl::write_where(&sysctls, false, |_| true)
        .map_err(|e| failed(format!("sandbox {id}: {e}")))?;
    *svc.sandbox_id.lock().unwrap_or_else(|e| e.into_inner()) = id.clone();
    crate::debug!("warm agent claimed by sandbox {id}");
    Ok(())
}
