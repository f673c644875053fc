//! The container's cgroup, made (or claimed) in the background from the
//! start of Create, so its mkdirs and writes overlap the agent's start and
//! the rootfs set-up instead of adding to them. Its undo is registered at
//! once: whichever step fails, a cgroup that got made is removed.
//!
//! A per-pod shim begins its pod's cgroup earlier still, as its server
//! starts ([`head`]): the Create that asks for that cgroup takes it.

use std::sync::{Arc, Mutex};

use oci_spec::runtime::{LinuxResources, Spec};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::undo::Undo;
use super::Service;
use super::TaskError;
use crate::cgroups::{self, ContainerCgroup};
use crate::error::Result;

pub mod head;

type Made = Result<ContainerCgroup>;

enum Slot {
    Pending(JoinHandle<Made>),
    Ready(ContainerCgroup),
    Gone,
}

pub struct EarlyCgroup {
    slot: Arc<Mutex<Slot>>,
    /// The device rules it was made with: devices added later are applied.
    devices: Option<Vec<oci_spec::runtime::LinuxDeviceCgroup>>,
    /// A head start's own figures, told to the Create's phases when ready.
    head: Option<head::Figures>,
}

/// The cgroup the container with this spec needs, at its exact path.
pub fn start(svc: &Arc<Service>, spec: &Spec, id: &str, undo: &mut Undo) -> EarlyCgroup {
    let path = cgroups::path_for(spec, id);
    let res = cgroups::resources_for(spec);
    let devices = res.devices().clone();
    let (handle, head) = match head::take(svc, id, &path, &res) {
        head::Taken::Same(handle, figures) => (handle, Some(figures)),
        head::Taken::Other(prior) => (made_after(svc, path, res, prior), None),
        head::Taken::None => (made(svc, path, res), None),
    };
    let slot = Arc::new(Mutex::new(Slot::Pending(handle)));
    let s = slot.clone();
    undo.push("cgroup", async move {
        let taken = std::mem::replace(&mut *lock(&s), Slot::Gone);
        let cg = match taken {
            Slot::Pending(h) => match h.await {
                Ok(Ok(cg)) => cg,
                _ => return,
            },
            Slot::Ready(cg) => cg,
            Slot::Gone => return,
        };
        if let Err(e) = cg.remove().await {
            tracing::warn!("undo cgroup: {e}");
        }
    });
    EarlyCgroup {
        slot,
        devices,
        head,
    }
}

/// Makes the cgroup at `path` on a blocking thread.
fn made(svc: &Arc<Service>, path: String, res: LinuxResources) -> JoinHandle<Made> {
    let svc = svc.clone();
    // Timed as `cgroup_made` in the phases: its own time, off the critical path.
    let made =
        tracing::trace_span!(target: crate::phase_layer::TARGET, "cgroup_made", measure = "wall");
    // Straight to a blocking thread, set-up and cgroup in one hop: when
    // hundreds of pods start at once, every hand-off between the runtime
    // thread and a blocking one waits for a CPU.
    tokio::task::spawn_blocking(move || -> Made {
        let _in = made.enter();
        let all = svc.cgroups()?;
        Ok(ContainerCgroup::create_blocking(&all, &path, res, &made)?)
    })
}

/// [`made`] once a head start's cgroup this Create does not want is gone
/// (it may sit at the same path).
fn made_after(
    svc: &Arc<Service>,
    path: String,
    res: LinuxResources,
    prior: JoinHandle<()>,
) -> JoinHandle<Made> {
    let svc = svc.clone();
    tokio::spawn(
        async move {
            let _ = prior.await;
            made(&svc, path, res)
                .await
                .map_err(TaskError::blocking("cgroup"))?
        }
        .in_current_span(),
    )
}

fn lock(s: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl EarlyCgroup {
    /// Waits for the cgroup. Device rules that `spec` gained since the
    /// start (injected devices) are added.
    pub async fn ready(&self, spec: &Spec) -> Result<ContainerCgroup> {
        let taken = std::mem::replace(&mut *lock(&self.slot), Slot::Gone);
        let cg = match taken {
            Slot::Pending(h) => h.await.map_err(TaskError::blocking("cgroup"))??,
            Slot::Ready(cg) => cg,
            Slot::Gone => return Err(TaskError::CgroupTaken.into()),
        };
        if let Some(figures) = &self.head {
            figures.tell();
        }
        *lock(&self.slot) = Slot::Ready(cg.clone());
        let now = cgroups::resources_for(spec).devices().clone();
        if now != self.devices {
            let mut res = LinuxResources::default();
            res.set_devices(now);
            cg.update(res).await?;
        }
        Ok(cg)
    }
}
