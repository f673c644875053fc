//! Resolving a container's namespace requests against its sandbox: shared
//! with the agent, new, or joined through an fd we open and check here.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use oci_spec::runtime::Spec;
use rund_proto::{NamespacePlan, NsSource};

use crate::error::{Result, ShimError};
use crate::sandbox::{self, Sandbox};
use crate::spec::namespaces::{request, NsRequest};
use crate::spec::Role;

pub fn plan(
    spec: &Spec,
    role: &Role,
    sandbox: &Sandbox,
) -> Result<(NamespacePlan, Vec<(String, OwnedFd)>)> {
    let mut plan = NamespacePlan::default();
    let mut fds = Vec::new();
    for kind in crate::spec::namespaces::KINDS {
        let req = request(spec, kind)?;
        let standalone = *role == Role::Standalone;
        let source = match req {
            // The agent already made (or joined) these for this container.
            _ if standalone && matches!(kind, "net" | "ipc" | "uts") => NsSource::NS_SANDBOX,
            NsRequest::New => NsSource::NS_NEW,
            NsRequest::Host if kind == "cgroup" => NsSource::NS_SANDBOX,
            // hostPID: the agent itself stays in the host pid namespace.
            NsRequest::Host if kind == "pid" && sandbox.host_pid => NsSource::NS_SANDBOX,
            NsRequest::Host if kind == "pid" => {
                return Err(ShimError::Spec(crate::spec::SpecError::Unsupported(
                    "linux.namespaces",
                    "the host pid namespace for a container whose pod sandbox has its own".into(),
                )))
            }
            NsRequest::Host => join_or_share(
                kind,
                PathBuf::from(format!("/proc/self/ns/{kind}")),
                sandbox,
                &mut fds,
            )?,
            NsRequest::Join(p) => join_or_share(kind, p, sandbox, &mut fds)?,
        };
        plan.set(kind, source);
    }
    Ok((plan, fds))
}

fn join_or_share(
    kind: &str,
    path: PathBuf,
    sandbox: &Sandbox,
    fds: &mut Vec<(String, OwnedFd)>,
) -> Result<NsSource> {
    if sandbox.is_own_ns(kind, &path) {
        // A shared pid namespace is the pod's, never the agent's own.
        if kind == "pid" && !sandbox.host_pid {
            return Ok(NsSource::NS_POD);
        }
        return Ok(NsSource::NS_SANDBOX);
    }
    let fd = sandbox::open_ns(kind, &path)?;
    fds.push((kind.to_string(), fd));
    Ok(NsSource::NS_FD)
}
