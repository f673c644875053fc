//! Create: everything host-side for a new container, then the agent's part.
//! On any error, what was set up is undone in reverse order.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use containerd_shim_protos::api::{CreateTaskRequest, CreateTaskResponse};
use oci_spec::runtime::Spec;
use rund_proto::fdpass::{FdHeader, FdKind};
use rund_proto::launch::LaunchConfig;
use rund_proto::options::ContainerOptions;

use super::namespaces;
use super::phases::Phases;
use super::state::{Container, Process, StdioInfo};
use super::Service;
use crate::cgroups::{self, ContainerCgroup};
use crate::error::{Result, ShimError};
use crate::io::{self, StdioPaths};
use crate::rlimit::memlock;
use crate::rootfs;
use crate::sandbox::spawn::SpawnPlan;
use crate::sandbox::{nsfd, pidmap, Sandbox};
use crate::spec::{self, Role};

/// What to undo if Create fails part-way.
#[derive(Default)]
struct Undo {
    unmount: Option<PathBuf>,
    sandbox: Option<Arc<Sandbox>>,
    cgroup: Option<ContainerCgroup>,
}

impl Undo {
    async fn run(self) {
        if let Some(sb) = self.sandbox {
            sb.teardown(Duration::ZERO).await;
        }
        if let Some(cg) = self.cgroup {
            if let Err(e) = cg.destroy().await {
                tracing::warn!("undo create: {e}");
            }
        }
        if let Some(bundle) = self.unmount {
            if let Err(e) = rootfs::cleanup(&bundle) {
                tracing::warn!("undo create: {e}");
            }
        }
    }
}

pub async fn create(svc: &Arc<Service>, req: CreateTaskRequest) -> Result<CreateTaskResponse> {
    if req.id.is_empty() {
        return Err(ShimError::InvalidArgument("container id is empty".into()));
    }
    if svc.containers.lock().await.contains_key(&req.id) {
        return Err(ShimError::AlreadyExists(format!(
            "container {} already exists",
            req.id
        )));
    }
    if !req.checkpoint.is_empty() {
        return Err(ShimError::Unimplemented(
            "rund does not support restoring from a checkpoint".into(),
        ));
    }
    let first = svc.containers.lock().await.is_empty() && svc.sandbox.lock().await.is_none();
    if let Some(path) = super::options::config_path(req.options.as_ref())? {
        // The pod's first container decides the config; later ones share it.
        if first {
            svc.use_config(crate::config::RundConfig::load(Some(Path::new(&path)))?);
        }
    }
    let bundle = PathBuf::from(&req.bundle);
    let spec = spec::load(&bundle)?;
    spec::check_supported(&spec)?;
    let mut undo = Undo::default();
    match create_inner(svc, &req, &bundle, spec, &mut undo).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            undo.run().await;
            Err(e)
        }
    }
}

async fn create_inner(
    svc: &Arc<Service>,
    req: &CreateTaskRequest,
    bundle: &Path,
    mut spec: Spec,
    undo: &mut Undo,
) -> Result<CreateTaskResponse> {
    let role = spec::role(&spec);
    let config = svc.config();
    let use_init = spec::use_init(&spec, config.init.enabled, &config.init.skip_for)?;
    let grace = spec::grace_seconds(&spec)?.unwrap_or(config.grace_period_seconds);
    let on_failure = memlock::OnFailure::parse(&config.memlock.on_failure)?;
    let stdio_info = StdioInfo {
        stdin: req.stdin.clone(),
        stdout: req.stdout.clone(),
        stderr: req.stderr.clone(),
        terminal: req.terminal,
    };

    // The sandbox comes first: the user namespace decides how the rootfs,
    // binds and devices are mounted.
    // Find the cgroup hierarchies (once per shim) while the sandbox starts:
    // per-process set-up, kept out of the container's cgroup phase.
    let cgroups_ready = {
        let svc = svc.clone();
        tokio::task::spawn_blocking(move || svc.cgroups())
    };
    let mut phases = Phases::start();
    let sandbox = match &role {
        Role::Standalone | Role::PodSandbox => {
            let sb = start_sandbox(svc, &req.id, &spec, grace).await?;
            crate::entry::serve::record_agent(bundle, sb.pid());
            undo.sandbox = Some(sb.clone());
            *svc.sandbox.lock().await = Some(sb.clone());
            sb
        }
        Role::PodContainer { sandbox_id } => svc.sandbox.lock().await.clone().ok_or_else(|| {
            ShimError::FailedPrecondition(format!(
                "pod sandbox {sandbox_id} is not running in this shim"
            ))
        })?,
    };
    if let Some((status, _)) = sandbox.exited() {
        return Err(ShimError::FailedPrecondition(format!(
            "pod sandbox {} has exited (status {status})",
            sandbox.id
        )));
    }
    spec::namespaced::check_namespaced(&spec, sandbox.userns)?;

    if role == Role::PodSandbox {
        phases.mark("sandbox");
        let cg = ContainerCgroup::create(
            &ready(cgroups_ready).await?,
            &cgroups::path_for(&spec, &req.id),
            cgroups::resources_for(&spec),
        )
        .await?;
        undo.cgroup = Some(cg.clone());
        phases.mark("cgroup");
        cg.add_pid(sandbox.pid()).await?;
        phases.mark("place");
        phases.record(&req.id, svc.config().trace.phases_file.as_deref());
        let init = Arc::new(Process::new(
            "",
            sandbox.pid(),
            1,
            stdio_info.clone(),
            None,
            None,
        ));
        let c = Container::new(&req.id, bundle, spec, true, false, Some(cg), init);
        return finish(svc, req, c).await;
    }

    // Devices: spec devices, cgroup rules and the memlock default.
    phases.mark("sandbox");
    let devices = super::devices::prepare(svc, &mut spec, sandbox.userns).await?;
    phases.mark("devices");
    for note in &devices.notes {
        tracing::info!(id = %req.id, "{note}");
    }
    let rlimits = devices.rlimits.clone();
    crate::rlimit::validate(&rlimits)?;
    let binds = super::userns::binds_mode(&spec, svc)?;

    let root_path = spec
        .root()
        .as_ref()
        .map(|r| r.path().clone())
        .unwrap_or_default();
    let (root_tree, mounted) =
        super::userns::rootfs_tree(bundle, &req.rootfs, &root_path, &sandbox)?;
    phases.mark("rootfs");
    if mounted {
        undo.unmount = Some(bundle.to_path_buf());
    }

    let cgroups = ready(cgroups_ready).await?;
    phases.mark("cgroup-init");
    let cg = ContainerCgroup::create(
        &cgroups,
        &cgroups::path_for(&spec, &req.id),
        cgroups::resources_for(&spec),
    )
    .await?;
    undo.cgroup = Some(cg.clone());
    phases.mark("cgroup");
    phases.extra("cgroup_cpu", cg.create_cpu);
    // Binds of the container's own cgroup (indices shift), then host /sys
    // binds (in place): both cloned plainly.
    let own_cgroup = spec::cgroupfs::OwnCgroup::of(cg.dirs());
    let mut host_sysfs = spec::cgroupfs::expand(&mut spec, &own_cgroup, sandbox.userns);
    host_sysfs.extend(super::userns::sysfs_to_bind(&mut spec, &sandbox));

    let (plan, ns_fds) = namespaces::plan(&spec, &role, &sandbox)?;
    let options = ContainerOptions {
        namespaces: plan,
        use_init,
        userns: sandbox.userns,
    };
    let stdio = io::open(&StdioPaths {
        stdin: req.stdin.clone(),
        stdout: req.stdout.clone(),
        stderr: req.stderr.clone(),
        terminal: req.terminal,
    })?;
    let mut owned: Vec<(FdKind, OwnedFd)> = vec![(FdKind::Rootfs, root_tree)];
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        let opts = m.options().clone().unwrap_or_default();
        let is_bind =
            m.typ().as_deref() == Some("bind") || opts.iter().any(|o| o == "bind" || o == "rbind");
        if !is_bind {
            continue;
        }
        let src = m.source().clone().unwrap_or_default();
        let dest = m.destination().display().to_string();
        if !src.exists() {
            return Err(rootfs::RootfsError::BindSource {
                path: src.display().to_string(),
                dest,
                reason: "does not exist".into(),
            }
            .into());
        }
        let recursive = opts.iter().any(|o| o == "rbind");
        let tree = if host_sysfs.contains(&i) {
            rootfs::open_tree_clone(&src, recursive)?
        } else {
            super::userns::bind_tree(&src, recursive, &sandbox, binds)?
        };
        owned.push((FdKind::Mount(i), tree));
    }
    for (kind, fd) in ns_fds {
        owned.push((FdKind::Namespace(kind), fd));
    }
    owned.extend(devices.device_fds);
    // v2: the init starts in its cgroup. Inside a user namespace the agent
    // may not write host-owned cgroup files, so there cgroup.procs it is.
    if !sandbox.userns {
        if let Some(fd) = cg.dir_fd() {
            owned.push((FdKind::Cgroup, fd));
        }
    }
    let (mut kinds, mut fds) = stdio.fds();
    kinds.extend(owned.iter().map(|(k, _)| k.clone()));
    fds.extend(owned.iter().map(|(_, f)| f.as_fd()));
    let header = FdHeader {
        container_id: req.id.clone(),
        exec_id: String::new(),
        fds: kinds,
    };
    let spec_json =
        serde_json::to_vec(&spec).map_err(|e| ShimError::Internal(format!("spec: {e}")))?;
    let inner = sandbox
        .agent
        .create_process(header, &fds, spec_json, &options, req.terminal)
        .await?;
    drop(fds);
    drop(owned);
    let crate::io::Stdio { pass, stdin, pty } = stdio;
    drop(pass);

    let host = match pidmap::host_pid(Path::new("/proc"), sandbox.pid(), inner) {
        Ok(p) => p,
        Err(e) => {
            let _ = sandbox
                .agent
                .signal(&req.id, "", libc::SIGKILL as u32, false)
                .await;
            return Err(e.into());
        }
    };
    phases.mark("agent");
    let placed = match cg.add_pid(host).await {
        Ok(()) => memlock::apply(host, &rlimits, on_failure).map_err(ShimError::from),
        Err(e) => Err(e.into()),
    };
    let placed = placed.map(|warnings| {
        for w in warnings {
            tracing::warn!(id = %req.id, "{w}");
        }
    });
    if let Err(e) = placed {
        let _ = sandbox
            .agent
            .signal(&req.id, "", libc::SIGKILL as u32, false)
            .await;
        let _ = sandbox.agent.wait(&req.id, "").await;
        let _ = sandbox.agent.delete_process(&req.id, "").await;
        return Err(e);
    }
    let init = Arc::new(Process::new("", host, inner, stdio_info, stdin, pty));
    phases.mark("place");
    phases.record(&req.id, svc.config().trace.phases_file.as_deref());
    finish(
        svc,
        req,
        Container::new(&req.id, bundle, spec, false, mounted, Some(cg), init),
    )
    .await
}

async fn finish(
    svc: &Arc<Service>,
    req: &CreateTaskRequest,
    container: Container,
) -> Result<CreateTaskResponse> {
    let pid = container.init.pid();
    let container = Arc::new(container);
    let stdio = container.init.stdio.clone();
    svc.containers
        .lock()
        .await
        .insert(req.id.clone(), container);
    svc.events
        .create(&req.id, &req.bundle, pid, &stdio, "")
        .await;
    tracing::info!(id = %req.id, pid, "created");
    Ok(CreateTaskResponse {
        pid,
        ..Default::default()
    })
}

async fn start_sandbox(
    svc: &Arc<Service>,
    id: &str,
    spec: &Spec,
    grace: u32,
) -> Result<Arc<Sandbox>> {
    if svc.sandbox.lock().await.is_some() {
        return Err(ShimError::FailedPrecondition(format!(
            "this shim already runs a sandbox; container {id} is not part of it"
        )));
    }
    let ns = spec::namespaces::sandbox_namespaces(spec)?;
    let mut join = Vec::new();
    for (kind, path) in &ns.join {
        join.push((kind.clone(), nsfd::open_ns(kind, path)?));
    }
    let hostname = spec
        .hostname()
        .clone()
        .filter(|h| !h.is_empty() && ns.new_uts);
    let userns = super::userns::plan(svc, spec, id).await?;
    let config = LaunchConfig {
        sandbox_id: id.to_string(),
        userns: userns.is_some(),
        new_net: ns.new_net,
        new_ipc: ns.new_ipc,
        new_uts: ns.new_uts,
        new_cgroup: false,
        hostname,
        rlimits: vec![],
        debug: svc.debug,
    };
    let log = crate::entry::logging::agent_log_fd();
    let plan = SpawnPlan {
        config,
        join,
        uid_map: userns
            .as_ref()
            .map(|u| u.uid_map.clone())
            .unwrap_or_default(),
        gid_map: userns
            .as_ref()
            .map(|u| u.gid_map.clone())
            .unwrap_or_default(),
        agent_bin: svc.config().agent_binary(),
        log,
    };
    let info = userns.map(|u| u.info);
    let lease = info.as_ref().and_then(|i| i.lease.as_ref()).is_some();
    match Sandbox::start(plan, Duration::from_secs(grace as u64), info).await {
        Ok(sb) => Ok(sb),
        Err(e) => {
            if lease {
                release_lease(svc, id).await;
            }
            Err(e.into())
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

async fn ready(
    task: tokio::task::JoinHandle<Result<Arc<rund_cgroup::Cgroups>>>,
) -> Result<Arc<rund_cgroup::Cgroups>> {
    task.await
        .map_err(|e| ShimError::Internal(format!("cgroup set-up task: {e}")))?
}
