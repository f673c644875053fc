//! Every request a pod's server answers counts as activity for the idle
//! trim (`rund_sys::trim`). Polls (State, Stats) count for less: what they
//! map back is what the next poll runs, so a shim that only containerd or
//! the kubelet polls trims after `[idle] trim_after_polls_ms`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use containerd_shim_protos::ttrpc::r#async::{
    MethodHandler, Service as TtrpcService, TtrpcContext,
};
use containerd_shim_protos::ttrpc::{Request, Response, Result};

use crate::task::Service;

/// Methods that only read what the shim knows, repeated while a pod idles:
/// the task API's and the sandbox API's.
const POLLS: &[&str] = &[
    "State",
    "Stats",
    "Pids",
    "Connect",
    "SandboxStatus",
    "PingSandbox",
    "SandboxMetrics",
    "Platform",
];

struct Active {
    name: String,
    poll: bool,
    inner: Box<dyn MethodHandler + Send + Sync>,
    svc: Arc<Service>,
}

#[async_trait]
impl MethodHandler for Active {
    async fn handler(&self, ctx: TtrpcContext, req: Request) -> Result<Response> {
        tracing::debug!(method = %self.name, "request");
        // Its start pushes back a trim counting down; its end counts in full.
        rund_sys::trim::touch();
        let r = self.inner.handler(ctx, req).await;
        tracing::debug!(method = %self.name, ok = r.is_ok(), "answered");
        let idle = &self.svc.config().idle;
        if self.poll {
            rund_sys::trim::poll(Duration::from_millis(idle.trim_after_polls_ms));
        } else {
            rund_sys::trim::activity(Duration::from_millis(idle.trim_after_ms));
        }
        r
    }
}

/// Wraps every method of `services` so that answering it counts as activity.
pub fn count(services: &mut HashMap<String, TtrpcService>, svc: &Arc<Service>) {
    for service in services.values_mut() {
        let methods = std::mem::take(&mut service.methods);
        service.methods = methods
            .into_iter()
            .map(|(name, inner)| {
                let wrapped: Box<dyn MethodHandler + Send + Sync> = Box::new(Active {
                    poll: POLLS.contains(&name.as_str()),
                    name: name.clone(),
                    inner,
                    svc: svc.clone(),
                });
                (name, wrapped)
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::POLLS;
    use containerd_shim_protos::{sandbox_async, shim_async};
    use std::collections::BTreeSet;
    use std::sync::Arc;

    struct Nothing;
    impl shim_async::Task for Nothing {}
    impl sandbox_async::Sandbox for Nothing {}

    #[test]
    fn polls_are_served_methods_and_changes_are_not_polls() {
        let services = shim_async::create_task(Arc::new(Nothing))
            .into_values()
            .chain(sandbox_async::create_sandbox(Arc::new(Nothing)).into_values());
        let names: BTreeSet<String> = services.flat_map(|s| s.methods.into_keys()).collect();
        for p in POLLS {
            assert!(
                names.contains(*p),
                "{p} is no method of the task or sandbox API"
            );
        }
        for m in [
            "Create",
            "Start",
            "Delete",
            "Kill",
            "Exec",
            "Wait",
            "Update",
            "CreateSandbox",
        ] {
            assert!(names.contains(m) && !POLLS.contains(&m), "{m}");
        }
    }
}
