//! A per-pod shim's cgroup head start (`[sandbox] head_start`): `start`
//! reads the pod's spec, and the server it forks begins the cgroup of the
//! pod's first container as it starts, while containerd reads `start`'s
//! reply, connects and sends Create. In a burst, that wait is the longest
//! of a start's steps, and a claim that lands in the kernel's lock convoys
//! (renames under `cgroup_mutex`) waits there instead of in the Create.
//!
//! The Create whose id, path, resources and cgroup config match takes it;
//! any other Create removes it first. A per-pod shim's first Create is its
//! only chance: after it, or when the server exits, an untaken one is
//! removed ([`discard`]); after a crash, `delete` removes it by the spec.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_spec::runtime::{LinuxResources, Spec};
use tokio::task::JoinHandle;

use super::Made;
use crate::cgroups::{self, ContainerCgroup};
use crate::phase_layer::thread_cpu;
use crate::spec::{self, Role};
use crate::task::Service;

/// What `start` read from the pod's spec: the cgroup its first Create will
/// ask for.
#[derive(Debug, Clone)]
pub struct Plan {
    id: String,
    path: String,
    res: LinuxResources,
}

/// A plan for the container `id` of this spec: a pod's first container (a
/// sandbox or a standalone one) whose spec Create would not refuse outright.
pub fn plan(spec: &Spec, id: &str) -> Option<Plan> {
    if !matches!(spec::role(spec), Role::Standalone | Role::PodSandbox) || id.is_empty() {
        return None;
    }
    spec::check_supported(spec).ok()?;
    Some(Plan {
        id: id.to_string(),
        path: cgroups::path_for(spec, id),
        res: cgroups::resources_for(spec),
    })
}

/// A head start under way or done.
pub struct Head {
    plan: Plan,
    /// The `[cgroup]` config it was made with.
    config: rund_cgroup::CgroupConfig,
    begun: Instant,
    handle: JoinHandle<Made>,
    own: Arc<Mutex<Option<(Duration, Duration)>>>,
}

/// The head start's figures for the Create's phases: how long before the
/// Create it began (`cgroup_lead`), and its own wall and CPU time
/// (`cgroup_made`, `cgroup_cpu`, as a Create's own making is timed).
pub struct Figures {
    lead: Duration,
    own: Arc<Mutex<Option<(Duration, Duration)>>>,
}

impl Figures {
    /// Once, when the cgroup is ready.
    pub fn tell(&self) {
        let Some((wall, cpu)) = lock(&self.own).take() else {
            return;
        };
        crate::phase_extra!("cgroup_lead", self.lead);
        crate::phase_extra!("cgroup_made", wall);
        crate::phase_extra!("cgroup_cpu", cpu);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Begins making the plan's cgroup on a blocking thread (call inside the
/// runtime).
pub fn begin(svc: &Arc<Service>, plan: Plan) {
    let own = Arc::new(Mutex::new(None));
    let (s, path, res, told) = (
        svc.clone(),
        plan.path.clone(),
        plan.res.clone(),
        own.clone(),
    );
    let handle = tokio::task::spawn_blocking(move || -> Made {
        let (t0, c0) = (Instant::now(), thread_cpu());
        // Timed here: no Create's phases exist yet to time it in.
        let untimed = tracing::Span::none();
        let made = (|| -> Made {
            let all = s.cgroups()?;
            Ok(ContainerCgroup::create_blocking(
                &all, &path, res, &untimed,
            )?)
        })();
        *lock(&told) = Some((t0.elapsed(), thread_cpu().saturating_sub(c0)));
        made
    });
    tracing::debug!(path = %plan.path, "head start: making the pod's cgroup");
    let head = Head {
        plan,
        config: svc.config().cgroup.clone(),
        begun: Instant::now(),
        handle,
        own,
    };
    if let Some(old) = lock(&svc.cgroup_head).replace(head) {
        drop(remove(old));
    }
}

pub enum Taken {
    /// The head start made this Create's cgroup.
    Same(JoinHandle<Made>, Figures),
    /// It made another: this Create's own waits for its removal.
    Other(JoinHandle<()>),
    None,
}

/// The head start for a Create of `id` wanting `path` with `res`.
pub fn take(svc: &Service, id: &str, path: &str, res: &LinuxResources) -> Taken {
    let Some(head) = lock(&svc.cgroup_head).take() else {
        return Taken::None;
    };
    let p = &head.plan;
    if p.id == id && p.path == path && &p.res == res && head.config == svc.config().cgroup {
        tracing::debug!(%path, "head start: the pod's cgroup taken");
        let figures = Figures {
            lead: head.begun.elapsed(),
            own: head.own,
        };
        return Taken::Same(head.handle, figures);
    }
    tracing::debug!(made = %p.path, wanted = %path, "head start: the pod's cgroup not wanted, removed");
    Taken::Other(remove(head))
}

/// Removes an untaken head start's cgroup: await the handle to know it is
/// gone. `None` when there is none.
pub fn discard(svc: &Service) -> Option<JoinHandle<()>> {
    let head = lock(&svc.cgroup_head).take()?;
    tracing::debug!(path = %head.plan.path, "head start: the pod's cgroup not taken, removed");
    Some(remove(head))
}

fn remove(head: Head) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Ok(Ok(cg)) = head.handle.await {
            if let Err(e) = cg.remove().await {
                tracing::warn!("head start: removing the pod's cgroup: {e}");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A spec Create accepts, with `linux` and `annotations` as given.
    fn spec(linux: serde_json::Value, annotations: serde_json::Value) -> Spec {
        serde_json::from_value(json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": linux,
            "annotations": annotations,
        }))
        .unwrap()
    }

    #[test]
    fn a_pods_first_container_gets_a_plan_for_its_cgroups_path() {
        let limited = json!({"cgroupsPath": "/kubepods/podx/c1",
                             "resources": {"memory": {"limit": 1048576}}});
        let p = plan(&spec(limited, json!({})), "c1").expect("a plan");
        assert_eq!(p.path, "/kubepods/podx/c1");
        assert_eq!(
            p.res.memory().as_ref().and_then(|m| m.limit()),
            Some(1048576)
        );
        // No cgroupsPath: the path Create would choose.
        let p = plan(&spec(json!({}), json!({})), "c2").expect("a plan");
        assert_eq!(p.path, "/rund/c2");
    }

    #[test]
    fn none_for_a_pods_later_container_or_a_spec_create_refuses() {
        let later = json!({"io.kubernetes.cri.container-type": "container",
                           "io.kubernetes.cri.sandbox-id": "pod1"});
        assert!(plan(&spec(json!({}), later), "c1").is_none());
        let refused = json!({"intelRdt": {"closID": "x"}});
        assert!(plan(&spec(refused, json!({})), "c1").is_none());
        assert!(plan(&spec(json!({}), json!({})), "").is_none());
    }
}
