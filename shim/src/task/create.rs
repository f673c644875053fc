//! Create: a pipeline of steps, each registering its undo (see `undo.rs`):
//! the cgroup (made in the background from the start, `early_cgroup.rs`),
//! sandbox (with its user namespace lease), devices and the write_bw gate,
//! rootfs, stdio, the agent's process, placement, and the
//! runtime-namespace hooks. The container id is reserved at entry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::Instrument;

use containerd_shim_protos::api::{CreateTaskRequest, CreateTaskResponse};
use oci_spec::runtime::Spec;
use rund_proto::fdpass::FdKind;
use rund_proto::ContainerOptions;

use super::early_cgroup;
use super::namespaces;
use super::spawn::{self, Spawn};
use super::state::{Container, Process};
use super::undo::Undo;
use super::Service;
use super::TaskError;
use crate::error::Result;
use crate::io;
use crate::rlimit::memlock;
use crate::rootfs;
use crate::spec::{self, Role};

pub async fn create(svc: &Arc<Service>, req: CreateTaskRequest) -> Result<CreateTaskResponse> {
    create_with(svc, req, true).await
}

/// Create, publishing TaskCreate or not (a sandbox API pod publishes none:
/// containerd publishes the sandbox's own events).
pub async fn create_with(
    svc: &Arc<Service>,
    req: CreateTaskRequest,
    publish: bool,
) -> Result<CreateTaskResponse> {
    let r = create_once(svc, req, publish).await;
    // A per-pod shim's cgroup head start serves its first Create or none.
    if let Some(removed) = early_cgroup::head::discard(svc) {
        let _ = removed.await;
    }
    r
}

async fn create_once(
    svc: &Arc<Service>,
    req: CreateTaskRequest,
    publish: bool,
) -> Result<CreateTaskResponse> {
    if req.id.is_empty() {
        return Err(TaskError::EmptyId { what: "container" }.into());
    }
    if !req.checkpoint.is_empty() {
        return Err(TaskError::Unsupported {
            what: "restoring from a checkpoint",
        }
        .into());
    }
    let _id = svc.reserve(&req.id).await?;
    crate::failpoint::hit("create:reserved", &req.id);
    let bundle = PathBuf::from(&req.bundle);
    let spec = spec::load(&bundle)?;
    spec::check_supported(&spec)?;
    let mut undo = Undo::new(format!("create {}", req.id));
    let timed = crate::create_span!(req.id);
    match steps(svc, &req, &bundle, spec, &mut undo)
        .instrument(timed)
        .await
    {
        Ok(c) => {
            crate::failpoint::hit("create:placed", &req.id);
            undo.commit();
            let pid = c.init.pid();
            let stdio = c.init.stdio.clone();
            svc.containers
                .lock()
                .await
                .insert(req.id.clone(), Arc::new(c));
            if publish {
                svc.events
                    .create(&req.id, &req.bundle, pid, &stdio, "")
                    .await;
            }
            tracing::debug!(id = %req.id, pid, "created");
            Ok(CreateTaskResponse {
                pid,
                ..Default::default()
            })
        }
        Err(e) => {
            undo.rollback().await;
            Err(e)
        }
    }
}

async fn steps(
    svc: &Arc<Service>,
    req: &CreateTaskRequest,
    bundle: &Path,
    mut spec: Spec,
    undo: &mut Undo,
) -> Result<Container> {
    let role = spec::role(&spec);
    // The pod's first container claims the sandbox and decides the config.
    let claim = match role {
        Role::Standalone | Role::PodSandbox => Some(super::pod::claim_first(svc, req)?),
        Role::PodContainer { .. } => None,
    };
    // Made at its exact path while the sandbox and the rootfs are set up.
    let early = early_cgroup::start(svc, &spec, &req.id, undo);
    let sandbox = match (&role, claim) {
        (_, Some(claim)) => super::pod::start(svc, claim, req, bundle, &spec, undo).await?,
        (Role::Standalone | Role::PodSandbox, None) => unreachable!("claimed above"),
        (Role::PodContainer { sandbox_id }, None) => {
            svc.sandbox().ok_or_else(|| TaskError::NotRunningHere {
                sandbox_id: sandbox_id.clone(),
            })?
        }
    };
    if let Some((status, _)) = sandbox.exited() {
        return Err(TaskError::SandboxExited {
            id: sandbox.id.clone(),
            status,
        }
        .into());
    }
    crate::phase!("sandbox");
    spec::namespaced::check_namespaced(&spec, sandbox.userns)?;
    let config = svc.config();
    let stdio = io::Stdio::of(&req.stdin, &req.stdout, &req.stderr, req.terminal);
    if role == Role::PodSandbox {
        // The agent plays the pod's sandbox container: its cgroup is the agent's.
        let cg = early.ready(&spec).await?;
        crate::phase!("cgroup");
        // The agent runs already and nothing waits on its place: the move
        // (a grace-period wait for the kernel's lock) goes on after the
        // reply; every later use of the cgroup waits for it.
        cg.add_pid_soon(sandbox.pid());
        crate::phase!("place");
        record_phases(&config);
        let init = Arc::new(Process::new("", sandbox.pid(), 1, stdio, None, None));
        return Ok(Container::new(
            &req.id,
            bundle,
            spec,
            true,
            false,
            Some(cg),
            init,
        ));
    }

    let use_init = spec::use_init(&spec, config.init.enabled, &config.init.skip_for)?;
    let on_failure = memlock::OnFailure::parse(&config.memlock.on_failure)?;
    let devices = super::devices::prepare(svc, &mut spec, sandbox.userns).await?;
    crate::phase!("devices");
    for note in &devices.notes {
        tracing::info!(id = %req.id, "{note}");
    }
    let rlimits = devices.rlimits.clone();
    crate::rlimit::validate(&rlimits)?;
    let binds = super::remap::container_binds(&spec, svc, &sandbox, &req.id)?;

    let root_path = spec
        .root()
        .as_ref()
        .map(|r| r.path().clone())
        .unwrap_or_default();
    // Mounting (overlay, idmapped) may wait on the kernel's mount locks: off
    // the shim's one runtime thread.
    let (root_tree, mounted) = {
        let (b, mounts, sb) = (bundle.to_path_buf(), req.rootfs.clone(), sandbox.clone());
        tokio::task::spawn_blocking(move || super::remap::rootfs_tree(&b, &mounts, &root_path, &sb))
            .await
            .map_err(TaskError::blocking("rootfs"))??
    };
    if mounted {
        let b = bundle.to_path_buf();
        undo.push("rootfs", async move {
            if let Err(e) = rootfs::cleanup(&b) {
                tracing::warn!("undo rootfs: {e}");
            }
        });
    }
    crate::phase!("rootfs");
    crate::failpoint::hit("create:rootfs", &req.id);

    let cg = early.ready(&spec).await?;
    crate::phase!("cgroup");
    crate::failpoint::hit("create:cgroup", &req.id);
    // Binds of the container's own cgroup (indices shift), then host /sys
    // binds (in place): both cloned plainly.
    let own_cgroup = spec::cgroupfs::OwnCgroup::of(cg.dirs());
    let mut host_sysfs = spec::cgroupfs::expand(&mut spec, &own_cgroup, sandbox.userns);
    host_sysfs.extend(super::remap::sysfs_to_bind(&mut spec, &sandbox));

    let (plan, ns_fds) = namespaces::plan(&spec, &role, &sandbox)?;
    let pause = crate::hooks::needs_pause(&spec);
    let options = ContainerOptions {
        namespaces: Some(plan).into(),
        use_init,
        userns: sandbox.userns,
        pause_before_pivot: pause,
        bundle: bundle.display().to_string(),
        ..Default::default()
    };
    super::remap::check_mount_idmaps(&spec, &sandbox, binds)?;
    let mut owned = vec![(FdKind::Rootfs, root_tree)];
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        if !rund_sys::mount::is_bind(
            m.typ().as_deref(),
            m.options().as_deref().unwrap_or_default(),
        ) {
            continue;
        }
        let src = m.source().clone().unwrap_or_default();
        if !src.exists() {
            return Err(rootfs::RootfsError::BindSource {
                path: src.display().to_string(),
                dest: m.destination().display().to_string(),
                reason: "does not exist".into(),
            }
            .into());
        }
        let recursive = m.options().iter().flatten().any(|o| o == "rbind");
        let tree = if host_sysfs.contains(&i) {
            rootfs::open_tree_clone(&src, recursive)?
        } else {
            super::remap::bind_tree(&src, recursive, &sandbox, binds)?
        };
        owned.push((FdKind::Mount(i), tree));
    }
    for (kind, fd) in ns_fds {
        owned.push((FdKind::Namespace(kind), fd));
    }
    owned.extend(devices.device_fds);
    owned.extend(spawn::birthplace(&cg, sandbox.userns));
    let spawned = spawn::container(
        Spawn {
            sandbox: &sandbox,
            id: &req.id,
            exec_id: "",
            stdio: &stdio,
            owned,
            keep_io: svc.keep_io(&req.id, ""),
        },
        &spec,
        options,
        undo,
    )
    .await?;
    crate::phase!("agent");
    crate::failpoint::hit("create:agent", &req.id);
    spawn::place(&spawned, Some(&cg), &rlimits, on_failure).await?;
    if spawned.paused {
        let state = crate::hooks::state_json(&spec, &req.id, "creating", spawned.host_pid, bundle);
        for kind in crate::hooks::BEFORE_PIVOT {
            crate::hooks::run(&spec, kind, &state).await?;
        }
        sandbox.agent.resume_container(&req.id).await?;
    }
    crate::phase!("place");
    record_phases(&config);
    let init = Arc::new(Process::new(
        "",
        spawned.host_pid,
        spawned.inner_pid,
        stdio,
        spawned.stdin,
        spawned.pty,
    ));
    Ok(Container::new(
        &req.id,
        bundle,
        spec,
        false,
        mounted,
        Some(cg),
        init,
    ))
}

/// Ends this Create's phase timeline (`phase_layer`), into `[trace] phases_file`.
fn record_phases(config: &crate::config::RundConfig) {
    if let Some(path) = &config.trace.phases_file {
        tracing::trace!(target: crate::phase_layer::TARGET, record = %path.display());
    }
}
