//! The shim's use of rund-cgroup: one cgroup per container, claimed from the
//! node-wide pool; blocking cgroupfs work runs off the async threads.

pub mod metrics;
pub mod recycle;

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxResources, Spec};
use rund_cgroup::{CgroupManager, Cgroups, OomWatcher, Stats};

#[derive(Debug, thiserror::Error)]
#[error("cgroup {path}: {source}")]
pub struct CgroupError {
    pub path: String,
    #[source]
    pub source: rund_cgroup::Error,
}

impl CgroupError {
    pub fn is_unimplemented(&self) -> bool {
        self.source.is_unimplemented()
    }
    /// The spec or config is wrong (a field, the cgroupsPath, a key).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self.source,
            rund_cgroup::Error::InvalidResource { .. }
                | rund_cgroup::Error::InvalidPath { .. }
                | rund_cgroup::Error::Config { .. }
        )
    }
    /// The node cannot do it as set up (a controller not delegated).
    pub fn is_precondition(&self) -> bool {
        matches!(self.source, rund_cgroup::Error::ControllerMissing(_))
    }
}

async fn blocking<T: Send + 'static>(
    path: &str,
    f: impl FnOnce() -> rund_cgroup::Result<T> + Send + 'static,
) -> Result<T, CgroupError> {
    let path = path.to_string();
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|source| CgroupError { path, source }),
        Err(e) => Err(CgroupError {
            source: rund_cgroup::Error::State {
                path: path.clone().into(),
                reason: format!("cgroup task: {e}"),
            },
            path,
        }),
    }
}

/// The cgroupsPath to use: the spec's, else `/rund/<id>`.
pub fn path_for(spec: &Spec, id: &str) -> String {
    spec.linux()
        .as_ref()
        .and_then(|l| l.cgroups_path().clone())
        .map(|p| p.display().to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("/rund/{id}"))
}

/// Resources with the device rules for the spec's own `linux.devices`
/// appended (the manager does not read `linux.devices`).
pub fn resources_for(spec: &Spec) -> LinuxResources {
    let linux = spec.linux().clone().unwrap_or_default();
    let mut res = linux.resources().clone().unwrap_or_default();
    if let Some(devs) = linux.devices() {
        let mut rules: Vec<LinuxDeviceCgroup> = res.devices().clone().unwrap_or_default();
        rules.extend(rund_cgroup::resources::allow_rules_for_devices(devs));
        res.set_devices(Some(rules));
    }
    res
}

#[derive(Clone)]
pub struct ContainerCgroup {
    mgr: CgroupManager,
    path: String,
    /// A placement still being written (`add_pid_soon`): every other use
    /// waits for it first.
    placing: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl ContainerCgroup {
    /// Creates (or claims) the cgroup on the calling thread, which must be
    /// one that may block. `cgroup_cpu` in the phases, a child of `parent`:
    /// the work, without the wait for a CPU that dominates wall time when
    /// hundreds start at once.
    pub fn create_blocking(
        cgroups: &Cgroups,
        path: &str,
        res: LinuxResources,
        parent: &tracing::Span,
    ) -> Result<Self, CgroupError> {
        let _cpu = tracing::trace_span!(target: crate::phase_layer::TARGET, parent: parent, "cgroup_cpu", measure = "cpu")
            .entered();
        let mgr = cgroups
            .create(path, Some(&res))
            .map_err(|source| CgroupError {
                path: path.to_string(),
                source,
            })?;
        Ok(ContainerCgroup::of(mgr, path))
    }

    fn of(mgr: CgroupManager, path: &str) -> Self {
        ContainerCgroup {
            mgr,
            path: path.to_string(),
            placing: Arc::default(),
        }
    }

    /// The cgroup of a running container this process did not create (a
    /// node shim restarted); removed, not pooled, at Delete.
    pub fn load(cgroups: &Cgroups, path: &str) -> Result<Self, CgroupError> {
        let mgr = cgroups.load(path).map_err(|source| CgroupError {
            path: path.to_string(),
            source,
        })?;
        Ok(ContainerCgroup::of(mgr, path))
    }

    /// v2: a directory fd the agent can start the init in
    /// (`clone3(CLONE_INTO_CGROUP)`); `None` on v1.
    pub fn dir_fd(&self) -> Option<std::os::fd::OwnedFd> {
        self.mgr.cgroup_dir_fd().ok()
    }

    /// v1: `tasks` of every hierarchy, open for writing, so the agent's
    /// forking thread can join the cgroup and the child is born in it
    /// (`rund_cgroup`'s `birth.rs`); empty on v2.
    pub fn tasks_fds(&self) -> Vec<std::os::fd::OwnedFd> {
        self.mgr.tasks_fds().unwrap_or_else(|e| {
            tracing::debug!(path = %self.path, "no birth in the cgroup: {e}");
            Vec::new()
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The host dirs of the cgroup (one per v1 hierarchy, or the v2 dir).
    pub fn dirs(&self) -> &rund_cgroup::Dirs {
        self.mgr.dirs()
    }

    pub async fn add_pid(&self, pid: i32) -> Result<(), CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.add_pid(pid)).await
    }

    /// [`add_pid`](Self::add_pid) without waiting: for a process that runs
    /// already and whose place nothing waits on (a pod's agent). A move
    /// waits a whole RCU grace period for the kernel's lock (about 10 ms on
    /// v1, see rund-cgroup's `birth.rs`). A failure is logged.
    pub fn add_pid_soon(&self, pid: i32) {
        let m = self.mgr.clone();
        let path = self.path.clone();
        let task = tokio::task::spawn_blocking(move || {
            let t = std::time::Instant::now();
            match m.add_pid(pid) {
                Ok(()) => tracing::debug!(%path, pid, took = ?t.elapsed(), "placed"),
                Err(e) => tracing::warn!(%path, pid, "placing the process: {e}"),
            }
        });
        *self.placing.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Waits for a placement [`add_pid_soon`](Self::add_pid_soon) started.
    async fn settled(&self) {
        let task = self
            .placing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    pub async fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.pids()).await
    }

    /// Sends `sig` (any number, real-time ones too) to every process in the
    /// cgroup, frozen meanwhile so none forks past it.
    pub async fn signal_all(&self, sig: i32) -> Result<(), CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        if sig == libc::SIGKILL {
            // v2: one write of cgroup.kill, which no fork can outrun.
            return blocking(&self.path, move || {
                m.kill_all(nix::sys::signal::Signal::SIGKILL).map(drop)
            })
            .await;
        }
        blocking(&self.path, move || {
            let frozen = m.freeze().is_ok();
            let pids = m.pids();
            for p in pids.iter().flatten() {
                // SAFETY: kill only sends a signal.
                unsafe { libc::kill(*p, sig) };
            }
            if frozen {
                m.thaw()?;
            }
            pids.map(drop)
        })
        .await
    }

    pub async fn freeze(&self) -> Result<(), CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.freeze()).await
    }

    pub async fn thaw(&self) -> Result<(), CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.thaw()).await
    }

    pub async fn stats(&self) -> Result<Stats, CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.stats()).await
    }

    pub async fn update(&self, res: LinuxResources) -> Result<(), CgroupError> {
        self.settled().await;
        let m = self.mgr.clone();
        blocking(&self.path, move || m.update(&res)).await
    }

    pub fn oom_watcher(&self) -> Result<OomWatcher, CgroupError> {
        self.mgr.oom_watcher().map_err(|source| CgroupError {
            path: self.path.clone(),
            source,
        })
    }

    /// Waits for the cgroup to empty, then recycles it into the pool (or
    /// removes it). A recycle's reset and publication follow the answer
    /// ([`recycle::settle`] waits for them at exit).
    pub async fn destroy(&self) -> Result<(), CgroupError> {
        self.settled().await;
        recycle::destroy(self.mgr.clone(), self.path.clone())
            .await
            .map_err(|source| CgroupError {
                path: self.path.clone(),
                source,
            })
    }

    /// Removes the cgroup of a container that is gone: whatever is still in it
    /// (a daemon reparented out of a shared pid namespace, the process of a
    /// dropped Create) is killed first, as runc's delete does. A process the
    /// kill cannot end yet (stuck on a hung volume) keeps the cgroup busy: a
    /// background task then retries until it is empty, so it is not left for
    /// good. The first error is returned for the log.
    pub async fn remove(&self) -> Result<(), CgroupError> {
        if self.pids().await.is_ok_and(|p| !p.is_empty()) {
            let m = self.mgr.clone();
            let _ = blocking(&self.path, move || {
                m.kill_all(nix::sys::signal::Signal::SIGKILL)
            })
            .await;
        }
        let err = match self.destroy().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let me = self.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + REMOVE_RETRY_LIMIT;
            while tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                if me.destroy().await.is_ok() {
                    tracing::info!(path = me.path, "busy cgroup removed on retry");
                    return;
                }
            }
            tracing::warn!(path = me.path, "cgroup still busy: left for `rund pool gc`");
        });
        Err(err)
    }
}

/// How long [`ContainerCgroup::remove`] keeps retrying a busy cgroup.
const REMOVE_RETRY_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::CgroupError;
    use crate::error::ShimError;
    use rund_cgroup::Error;

    fn code(source: Error) -> ttrpc::Code {
        ShimError::Cgroup(CgroupError {
            path: "/p/c".into(),
            source,
        })
        .code()
    }

    #[test]
    fn cgroup_errors_map_to_the_right_codes() {
        assert_eq!(
            code(Error::ControllerMissing("rdma")),
            ttrpc::Code::FAILED_PRECONDITION
        );
        let bad = Error::InvalidResource {
            field: "unified",
            reason: "x".into(),
        };
        assert_eq!(code(bad), ttrpc::Code::INVALID_ARGUMENT);
        assert_eq!(
            code(Error::Unimplemented("x".into())),
            ttrpc::Code::UNIMPLEMENTED
        );
        assert_eq!(code(Error::NotFound("/x".into())), ttrpc::Code::INTERNAL);
    }
}
