//! A per-pod shim's head start, judged by `start` from the pod's spec
//! (`sandbox::head_start`): an agent in the warm template for a pod that fits
//! it, else the pod's own agent, planned as its Create would plan it (its
//! namespaces, hostname, sysctls and leased ids) and taken by the Create only
//! if the Create plans the same.

use oci_spec::runtime::Spec;

use super::{hostname, launch_plan, pod_sysctls, Service};
use crate::config::RundConfig;
use crate::sandbox::head_start::{self, Early, HeadStart};
use crate::sandbox::spawn::SpawnPlan;
use crate::sandbox::{self, warm, SandboxError};
use crate::spec::namespaces::SandboxNamespaces;
use crate::spec::{self, Role};
use crate::task::remap;
use crate::userns::{self, UsernsMode};

/// What `start` hands the server it forks.
#[derive(Debug, Clone, PartialEq)]
pub enum HeadPlan {
    /// The pod fits the warm template.
    Template(head_start::Plan),
    /// It does not: an agent of its own.
    Own(Box<Own>),
}

/// A pod's own launch, as far as `start` can judge it.
#[derive(Debug, Clone, PartialEq)]
pub struct Own {
    id: String,
    spec: Spec,
    ns: SandboxNamespaces,
    /// The ids to lease (`None`: no user namespace).
    remap: Option<remap::Judged>,
}

/// The head start for the pod of this spec (sandbox id `id`), judged before
/// its Create: for a pod's first container (a CRI pod sandbox or a
/// standalone container) whose Create would not refuse it outright. A pod
/// in the warm template (no user namespace by its spec or the config, not
/// hostPID, its own ipc and uts namespaces, nothing joined but the network
/// namespace) gets one of those; any other gets its own, unless its Create
/// must first probe its rootfs to know whether it gets a user namespace
/// (`[userns] on_unsupported = "host"` under mode "always").
pub fn head_start_plan(spec: &Spec, config: &RundConfig, id: &str) -> Option<HeadPlan> {
    if id.is_empty() || !matches!(spec::role(spec), Role::Standalone | Role::PodSandbox) {
        return None;
    }
    let ns = spec::namespaces::sandbox_namespaces(spec).ok()?;
    let decision = userns::decide(spec, &config.userns, config.policy.allow_userns_host).ok()?;
    let userns = ns.userns || decision.mode != UsernsMode::Off;
    let joined: Vec<&str> = ns.join.iter().map(|(k, _)| k.as_str()).collect();
    if warm::fits(userns, ns.host_pid, ns.new_ipc, ns.new_uts, &joined) {
        return Some(HeadPlan::Template(head_start::Plan {
            new_net: ns.new_net,
        }));
    }
    let remap = remap::judge(config, spec, id).ok()?;
    if remap.as_ref().is_some_and(|j| j.needs_probe) {
        return None;
    }
    Some(HeadPlan::Own(Box::new(Own {
        id: id.to_string(),
        spec: spec.clone(),
        ns,
        remap,
    })))
}

/// A head start begun, with the sandbox id whose ids it leases and the
/// config it leases them under, if it does.
pub struct EarlyHead {
    early: Early,
    leases: Option<(String, RundConfig)>,
}

/// Begins this per-pod shim's head start before its runtime exists; the
/// shim's log must be open.
pub fn early_head_start(config: &RundConfig, debug: bool, plan: HeadPlan) -> EarlyHead {
    match plan {
        HeadPlan::Template(plan) => EarlyHead {
            early: Early::begin(&warm::Template::of(config, debug), plan),
            leases: None,
        },
        HeadPlan::Own(own) => {
            let leases = own.leases().then(|| (own.id.clone(), config.clone()));
            let config = config.clone();
            let early =
                Early::begin_own(config.agent_binary(), move || own.prepare(&config, debug));
            EarlyHead { early, leases }
        }
    }
}

impl Own {
    /// Whether the launch leases ids (a user namespace).
    pub fn leases(&self) -> bool {
        self.remap.is_some()
    }

    /// The spawn plan, on the launch thread: the namespaces to join opened,
    /// and the ids leased to this shim (the Create's lease of the same
    /// sandbox id gets the same ids).
    fn prepare(self, config: &RundConfig, debug: bool) -> Result<SpawnPlan, SandboxError> {
        let mut join = Vec::new();
        for (kind, path) in &self.ns.join {
            join.push((kind.clone(), sandbox::open_ns(kind, path)?));
        }
        let userns = match self.remap {
            Some(judged) => {
                let owner = std::process::id() as i32;
                Some(
                    remap::lease(config, judged, &self.id, owner)
                        .map_err(|e| SandboxError::Spawn(format!("user namespace lease: {e}")))?,
                )
            }
            None => None,
        };
        let sysctls = pod_sysctls(&self.spec, userns.as_ref());
        let hostname = hostname(&self.spec, &self.ns);
        Ok(launch_plan(
            config,
            debug,
            &self.id,
            &self.ns,
            hostname,
            sysctls,
            userns.as_ref(),
            join,
        ))
    }
}

/// Hands the early launch to the service, which connects to its agent in
/// the background; call inside the runtime, before the pod's first Create.
pub fn begin_head_start(svc: &Service, early: EarlyHead) {
    if let Some(leased) = early.leases {
        let _ = svc.head_lease.set(leased);
    }
    if let Err(second) = svc.head_start.set(HeadStart::launch(early.early)) {
        second.discard();
    }
}

/// At the server's exit, or when it fails after the head start was handed
/// over: an agent launched ahead and never taken is killed once its launch
/// ends (awaited, so none outlives the server), and ids it leased that
/// nothing took are freed (in the lease file of the config it leased them
/// under, which a Create may have switched).
pub async fn end_head_start(svc: &Service) {
    if let Some(head) = svc.head_start.get() {
        head.abandon().await;
    }
    if let Some((id, config)) = svc.head_lease.get().cloned() {
        free_leased(id, config).await;
    }
}

/// A server that fails before it serves, its head start not yet handed to
/// a service: the same, so the failed `start` leaves no process and no lease.
pub async fn abandon_early_head(early: EarlyHead) {
    early.early.abandon().await;
    if let Some((id, config)) = early.leases {
        free_leased(id, config).await;
    }
}

/// Frees the ids leased ahead under `config` that nothing took.
async fn free_leased(id: String, config: RundConfig) {
    let freed = tokio::task::spawn_blocking(move || {
        userns::LeaseStore::in_state_dir(&config.state_dir, &config.userns)
            .and_then(|s| s.release_owned(&id, std::process::id() as i32))
    })
    .await;
    if let Ok(Ok(n)) = freed.as_ref() {
        if *n > 0 {
            tracing::debug!("head start: freed the ids leased ahead, never taken");
        }
    } else {
        tracing::warn!("head start: freeing the ids leased ahead: {freed:?}");
    }
}
