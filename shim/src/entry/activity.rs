//! Every request a pod's server answers counts as activity for the idle
//! trim (`rund_sys::trim`): a shim that containerd polls (State, Stats)
//! maps back the code it runs, and trims it again once the polls stop.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use containerd_shim_protos::ttrpc::r#async::{
    MethodHandler, Service as TtrpcService, TtrpcContext,
};
use containerd_shim_protos::ttrpc::{Request, Response, Result};

use crate::task::Service;

struct Active {
    name: String,
    inner: Box<dyn MethodHandler + Send + Sync>,
    svc: Arc<Service>,
}

#[async_trait]
impl MethodHandler for Active {
    async fn handler(&self, ctx: TtrpcContext, req: Request) -> Result<Response> {
        tracing::debug!(method = %self.name, "request");
        // A request may outlast the delay: no trim in its middle.
        rund_sys::trim::touch();
        let r = self.inner.handler(ctx, req).await;
        tracing::debug!(method = %self.name, ok = r.is_ok(), "answered");
        let ms = self.svc.config().idle.trim_after_ms;
        rund_sys::trim::activity(Duration::from_millis(ms));
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
                    name: name.clone(),
                    inner,
                    svc: svc.clone(),
                });
                (name, wrapped)
            })
            .collect();
    }
}
