//! Resolving a container's namespace requests against its sandbox: shared
//! with the agent, new, or joined through an fd we open and check here.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use oci_spec::runtime::Spec;
use rund_proto::options::{NamespacePlan, NsSource};

use crate::error::{Result, ShimError};
use crate::sandbox::{nsfd, Sandbox};
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
            _ if standalone && matches!(kind, "net" | "ipc" | "uts") => NsSource::Sandbox,
            NsRequest::New => NsSource::New,
            NsRequest::Host if kind == "cgroup" => NsSource::Sandbox,
            NsRequest::Host if kind == "pid" => {
                return Err(ShimError::Spec(crate::spec::SpecError::Unsupported(
                    "linux.namespaces",
                    "the host pid namespace (hostPID)".into(),
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
        match kind {
            "pid" => plan.pid = source,
            "net" => plan.net = source,
            "ipc" => plan.ipc = source,
            "uts" => plan.uts = source,
            _ => plan.cgroup = source,
        }
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
        return Ok(NsSource::Sandbox);
    }
    let fd = nsfd::open_ns(kind, &path)?;
    fds.push((kind.to_string(), fd));
    Ok(NsSource::Fd)
}
