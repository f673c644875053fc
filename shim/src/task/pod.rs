//! The pod's sandbox: claimed once per shim, started by the pod's first
//! container (a CRI pod sandbox, or a standalone `ctr run` container), and
//! torn down with the last one.

mod head;
pub use head::{
    abandon_early_head, begin_head_start, early_head_start, end_head_start, head_start_plan,
    EarlyHead, HeadPlan,
};

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use containerd_shim_protos::api::CreateTaskRequest;
use oci_spec::runtime::Spec;
use rund_proto::launch::LaunchConfig;

use super::undo::Undo;
use super::Service;
use super::TaskError;
use crate::config::RundConfig;
use crate::error::Result;
use crate::sandbox::spawn::SpawnPlan;
use crate::sandbox::{self, warm, About, Sandbox};
use crate::spec;

/// The shim's one sandbox.
#[derive(Default)]
pub enum Slot {
    #[default]
    Empty,
    /// A Create is starting it.
    Starting,
    Ready(Arc<Sandbox>),
}

/// A claim on the empty slot; dropped unfulfilled, it empties the slot again.
pub struct Claim<'a> {
    slot: &'a Mutex<Slot>,
    done: bool,
}

impl Claim<'_> {
    fn fulfil(mut self, sb: Arc<Sandbox>) {
        *lock(self.slot) = Slot::Ready(sb);
        self.done = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            *lock(self.slot) = Slot::Empty;
        }
    }
}

pub fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// Claims the empty slot: the one Create that may start this shim's sandbox.
pub fn claim<'a>(slot: &'a Mutex<Slot>, id: &str) -> Result<Claim<'a>> {
    let mut s = lock(slot);
    if !matches!(*s, Slot::Empty) {
        return Err(TaskError::ShimTaken { id: id.into() }.into());
    }
    *s = Slot::Starting;
    Ok(Claim { slot, done: false })
}

/// Claims the slot for the pod's first container and switches to the config
/// its runtime options name (later containers share it).
pub fn claim_first<'a>(svc: &'a Service, req: &CreateTaskRequest) -> Result<Claim<'a>> {
    let claim = claim(&svc.sandbox, &req.id)?;
    if let Some(path) = super::options::config_path(req.options.as_ref())? {
        // The shim's server read that file as it started (`start` gave it the path).
        if svc.config_in_force().as_deref() != Some(Path::new(&path)) {
            svc.use_config(crate::config::RundConfig::load(Some(Path::new(&path)))?);
            svc.set_config_in_force(path.into());
        }
    }
    Ok(claim)
}

pub async fn start(
    svc: &Arc<Service>,
    claim: Claim<'_>,
    req: &CreateTaskRequest,
    bundle: &Path,
    spec: &Spec,
    undo: &mut Undo,
) -> Result<Arc<Sandbox>> {
    let id = req.id.as_str();
    let config = svc.config();
    let grace = crate::policy::limits::grace_seconds(
        &config.policy,
        spec::grace_seconds(spec)?,
        config.grace_period_seconds,
    )?;
    let ns = spec::namespaces::sandbox_namespaces(spec)?;
    let mut join = Vec::new();
    for (kind, path) in &ns.join {
        join.push((kind.clone(), sandbox::open_ns(kind, path)?));
    }
    let hostname = hostname(spec, &ns);
    let userns = super::remap::plan(svc, spec, id, bundle, &req.rootfs).await?;
    let sysctls = pod_sysctls(spec, userns.as_ref());
    let about = About {
        id: id.to_string(),
        grace: Duration::from_secs(grace as u64),
        userns: userns.is_some(),
        owns_net: ns.new_net,
        host_pid: ns.host_pid,
    };
    let joined: Vec<&str> = join.iter().map(|(k, _)| k.as_str()).collect();
    let fits = warm::fits(about.userns, ns.host_pid, ns.new_ipc, ns.new_uts, &joined);
    // With whether the agent made the pod's network namespace at launch.
    let warm_agent = svc
        .warm
        .get()
        .filter(|_| fits)
        .and_then(|pool| pool.take(&config.agent_binary()))
        .map(|agent| (agent, false));
    let warm_agent = match (warm_agent, svc.head_start.get()) {
        (None, Some(head)) if fits => head.take(&config.agent_binary(), ns.new_net).await,
        (agent, _) => agent,
    };
    let sb = if let Some((agent, net_made)) = warm_agent {
        svc.discard_head_start();
        let about = about.clone();
        claim_warm(agent, net_made, about, &mut join, &hostname, &sysctls).await?
    } else {
        None
    };
    let sb = if let Some(sb) = sb {
        sb
    } else {
        let plan = launch_plan(
            &config,
            svc.debug,
            id,
            &ns,
            hostname,
            sysctls,
            userns.as_ref(),
            join,
        );
        let own = match svc.head_start.get() {
            Some(head) => head.take_own(&plan).await,
            None => None,
        };
        // A per-pod shim starts one sandbox: an agent not taken now never is.
        svc.discard_head_start();
        let info = userns.map(|u| u.info);
        let leased = info.as_ref().and_then(|i| i.lease.as_ref()).is_some();
        let started = match own {
            Some(agent) => {
                let _taken = tracing::trace_span!(
                    target: crate::phase_layer::TARGET,
                    "head_taken",
                    measure = "wall"
                )
                .entered();
                tracing::debug!(sandbox = %id, pid = agent.pid, "took the agent launched ahead");
                Sandbox::launched(agent, about, info)
            }
            None => Sandbox::start(plan, about, info).await,
        };
        match started {
            Ok(sb) => sb,
            Err(e) => {
                if leased {
                    release_lease(svc, id).await;
                }
                return Err(e.into());
            }
        }
    };
    crate::failpoint::hit("create:sandbox", id);
    crate::record::agent(bundle, sb.pid());
    claim.fulfil(sb.clone());
    svc.keep_agent(&sb);
    let (s, b) = (svc.clone(), sb.clone());
    undo.push("sandbox", async move {
        if let Some(sb) = s.take_sandbox() {
            sb.teardown(Duration::ZERO).await;
        } else {
            b.teardown(Duration::ZERO).await;
        }
    });
    Ok(sb)
}

/// How a pod's sandbox is launched cold: by its Create, or by its shim's
/// head start ahead of it ([`head`]), which must plan it the same way.
#[allow(clippy::too_many_arguments)]
fn launch_plan(
    config: &RundConfig,
    debug: bool,
    id: &str,
    ns: &spec::namespaces::SandboxNamespaces,
    hostname: Option<String>,
    sysctls: Vec<(String, String)>,
    userns: Option<&super::remap::Plan>,
    join: Vec<(String, std::os::fd::OwnedFd)>,
) -> SpawnPlan {
    let launch = LaunchConfig {
        sandbox_id: id.to_string(),
        userns: userns.is_some(),
        new_net: ns.new_net,
        new_ipc: ns.new_ipc,
        new_uts: ns.new_uts,
        host_pid: ns.host_pid,
        hostname,
        // With a user namespace in a host-owned netns: what Kubernetes sets
        // for userns pods, so ports below 1024 and ping work.
        sysctls,
        debug,
        trim_after_ms: config.idle.trim_after_ms,
        warm: false,
        // Not in a user namespace: its copy would be locked to it.
        root_template: config.sandbox.root_template().filter(|_| userns.is_none()),
    };
    SpawnPlan {
        config: launch,
        join,
        uid_map: userns.map(|u| u.uid_map.clone()).unwrap_or_default(),
        gid_map: userns.map(|u| u.gid_map.clone()).unwrap_or_default(),
        agent_bin: config.agent_binary(),
        log: crate::logging::agent_log_fd(),
    }
}

/// The pod's hostname, if it has a UTS namespace of its own to set it in.
fn hostname(spec: &Spec, ns: &spec::namespaces::SandboxNamespaces) -> Option<String> {
    spec.hostname()
        .clone()
        .filter(|h| !h.is_empty() && ns.new_uts)
}

/// Claims a warm agent for this pod (`net_made`: it made the pod's network
/// namespace at launch). A warm agent that died waiting gives `None` (the
/// pod starts cold, with `join` as it was); a claim the agent refused is the
/// pod's error.
async fn claim_warm(
    agent: sandbox::Agent,
    net_made: bool,
    about: About,
    join: &mut Vec<(String, std::os::fd::OwnedFd)>,
    hostname: &Option<String>,
    sysctls: &[(String, String)],
) -> Result<Option<Arc<Sandbox>>> {
    let id = about.id.clone();
    tracing::debug!(sandbox = %id, pid = agent.pid, "claiming a warm agent");
    // `warm_claim` in the phases: the claim's time, and the mark that one was made.
    let _claim =
        tracing::trace_span!(target: crate::phase_layer::TARGET, "warm_claim", measure = "wall");
    let mut claim = warm::ClaimPlan {
        net: join.pop().map(|(_, fd)| fd),
        net_made,
        hostname: hostname.clone(),
        sysctls: sysctls.to_vec(),
    };
    match Sandbox::claim(agent, about, &claim).await {
        Ok(sb) => Ok(Some(sb)),
        Err(
            e @ sandbox::SandboxError::Rpc {
                status: rund_proto::ttrpc::Error::RpcStatus(_),
                ..
            },
        ) => Err(e.into()),
        Err(e) => {
            tracing::warn!(sandbox = %id, "warm agent lost ({e}): starting the sandbox cold");
            if let Some(fd) = claim.net.take() {
                join.push(("net".into(), fd));
            }
            Ok(None)
        }
    }
}

/// Frees a sandbox's id range after a failed start.
async fn release_lease(svc: &Arc<Service>, id: &str) {
    let config = svc.config();
    let id = id.to_string();
    let _ = tokio::task::spawn_blocking(move || {
        crate::userns::LeaseStore::in_state_dir(&config.state_dir, &config.userns)
            .and_then(|s| s.release(&id))
    })
    .await;
}

/// The pod's sysctls: the sandbox spec's (CRI pod sysctls), then what rund
/// adds for a user-namespaced pod where the spec does not set them.
fn pod_sysctls(spec: &Spec, userns: Option<&super::remap::Plan>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = spec
        .linux()
        .as_ref()
        .and_then(|l| l.sysctl().clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    out.sort();
    for (k, v) in userns.map(|u| u.pod_sysctls.clone()).unwrap_or_default() {
        if !out.iter().any(|(have, _)| *have == k) {
            out.push((k, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxNamespaceBuilder, LinuxNamespaceType};

    fn with_namespaces(kinds: &[(LinuxNamespaceType, Option<&str>)]) -> Spec {
        let mut spec = Spec::default();
        let list = kinds
            .iter()
            .map(|(typ, path)| {
                let mut b = LinuxNamespaceBuilder::default().typ(*typ);
                if let Some(p) = path {
                    b = b.path(*p);
                }
                b.build().unwrap()
            })
            .collect();
        let mut linux = spec.linux().clone().unwrap_or_default();
        linux.set_namespaces(Some(list));
        spec.set_linux(Some(linux));
        spec
    }

    fn plain() -> Vec<(LinuxNamespaceType, Option<&'static str>)> {
        use LinuxNamespaceType::*;
        vec![
            (Pid, None),
            (Ipc, None),
            (Uts, None),
            (Mount, None),
            (Network, None),
        ]
    }

    fn plan(spec: &Spec, config: &RundConfig) -> Option<HeadPlan> {
        head_start_plan(spec, config, "p1")
    }

    /// The pod's own launch: whether it leases ids.
    fn own(plan: Option<HeadPlan>) -> Option<bool> {
        match plan {
            Some(HeadPlan::Own(own)) => Some(own.leases()),
            _ => None,
        }
    }

    #[test]
    fn plain_pods_fit_the_template_before_create() {
        use LinuxNamespaceType::*;
        let config = RundConfig::default();
        let template = |new_net| {
            Some(HeadPlan::Template(crate::sandbox::head_start::Plan {
                new_net,
            }))
        };
        assert_eq!(
            plan(&with_namespaces(&plain()), &config),
            template(true),
            "a network namespace of its own: made at launch"
        );
        let mut cni = plain();
        cni[4].1 = Some("/var/run/netns/cni-1");
        assert_eq!(
            plan(&with_namespaces(&cni), &config),
            template(false),
            "CNI netns: joined at the claim"
        );
        let host_net: Vec<_> = plain().into_iter().filter(|(t, _)| *t != Network).collect();
        assert_eq!(
            plan(&with_namespaces(&host_net), &config),
            template(false),
            "hostNetwork"
        );
    }

    #[test]
    fn pods_the_template_does_not_fit_get_their_own_launch() {
        use LinuxNamespaceType::*;
        let config = RundConfig::default();
        let host_pid: Vec<_> = plain().into_iter().filter(|(t, _)| *t != Pid).collect();
        assert_eq!(
            own(plan(&with_namespaces(&host_pid), &config)),
            Some(false),
            "hostPID"
        );
        let host_ipc: Vec<_> = plain().into_iter().filter(|(t, _)| *t != Ipc).collect();
        assert_eq!(
            own(plan(&with_namespaces(&host_ipc), &config)),
            Some(false),
            "hostIPC"
        );
        let always = RundConfig::parse("[userns]\nmode = \"always\"\n", Path::new("x")).unwrap();
        assert_eq!(
            own(plan(&with_namespaces(&plain()), &always)),
            Some(true),
            "userns by config: the pod's ids leased ahead"
        );
        let probe = RundConfig::parse(
            "[userns]\nmode = \"always\"\non_unsupported = \"host\"\n",
            Path::new("x"),
        )
        .unwrap();
        assert!(
            plan(&with_namespaces(&plain()), &probe).is_none(),
            "the Create's rootfs decides whether it gets a user namespace"
        );
        assert!(
            head_start_plan(&with_namespaces(&plain()), &config, "").is_none(),
            "no sandbox id"
        );
        let mut container = with_namespaces(&plain());
        container.set_annotations(Some(
            [
                (
                    "io.kubernetes.cri.container-type".to_string(),
                    "container".to_string(),
                ),
                (
                    "io.kubernetes.cri.sandbox-id".to_string(),
                    "pod1".to_string(),
                ),
            ]
            .into(),
        ));
        assert!(
            plan(&container, &config).is_none(),
            "not the pod's first container"
        );
    }
}
