//! One container's cgroup: create (or claim), apply, update, add pids,
//! freeze, stats, OOM, kill and destroy.

mod freezer;

pub use freezer::FreezerState;

use crate::ctl;
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use crate::oom::OomWatcher;
use crate::path::CgroupPath;
use crate::pool::{PendingRecycle, Pool, Released, Releasing};
use crate::resources::{self, devices, Mode};
use crate::stats::{self, Stats};
use crate::tree;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use oci_spec::runtime::LinuxResources;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What [`CgroupManager::destroy_detached`] left to do.
#[derive(Debug)]
pub enum Destroyed {
    /// Nothing: given back, or already gone (`None`).
    Done(Option<Released>),
    /// Off its path, recycling: finish it to publish the slot.
    Recycling(PendingRecycle),
}

/// The cgroup of one container.
#[derive(Debug, Clone)]
pub struct CgroupManager {
    pub(crate) fs: Arc<dyn CgroupFs>,
    pub(crate) path: CgroupPath,
    pub(crate) dirs: Dirs,
    pub(crate) pool: Option<Arc<Pool>>,
    pub(crate) pooled: bool,
    /// Set while this process counts the container as live in its parent
    /// (created here, not yet destroyed); shared by clones.
    pub(crate) live: Option<Arc<AtomicBool>>,
    pub(crate) reclaim: bool,
    pub(crate) empty_timeout: Duration,
    pub(crate) freeze_timeout: Duration,
}

impl CgroupManager {
    /// The parsed cgroupsPath.
    pub fn path(&self) -> &CgroupPath {
        &self.path
    }

    /// Where the cgroup lives (v1: one dir per hierarchy; v2: one dir),
    /// always at the cgroupsPath.
    pub fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    /// Whether the cgroup came from the pool (renamed, no mkdir on create).
    pub fn pooled(&self) -> bool {
        self.pooled
    }

    /// Apply resources (create-time semantics: device rules always set).
    pub fn apply(&self, res: &LinuxResources) -> Result<()> {
        resources::apply(self.fs.as_ref(), &self.dirs, res, Mode::Create)
    }

    /// Change resources live; only the fields present change. The kernel's
    /// refusal (e.g. EBUSY for a memory limit below usage) comes back as
    /// [`Error::Write`] naming the file and value.
    pub fn update(&self, res: &LinuxResources) -> Result<()> {
        resources::apply(self.fs.as_ref(), &self.dirs, res, Mode::Update)
    }

    /// Move a host pid into the cgroup (every v1 hierarchy including
    /// name=systemd, or the v2 directory).
    pub fn add_pid(&self, pid: i32) -> Result<()> {
        if pid <= 0 {
            return Err(Error::InvalidResource {
                field: "pid",
                reason: format!("{pid} is not a process id"),
            });
        }
        // A process born in its cgroup (`birth.rs`) is already there;
        // writing cgroup.procs again would still take the kernel's global
        // threadgroup lock for nothing.
        let missing = match &self.dirs {
            Dirs::V2(d) if tree::in_cgroup_v2(d, pid) => Vec::new(),
            Dirs::V2(d) => vec![d.as_path()],
            Dirs::V1(v) => {
                let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok();
                crate::birth::missing_v1(v, text.as_deref())
            }
        };
        for d in missing {
            ctl::write(self.fs.as_ref(), d, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Host pids in the cgroup.
    pub fn pids(&self) -> Result<Vec<i32>> {
        ctl::procs(self.fs.as_ref(), self.dirs.procs_dir())
    }

    pub fn freeze(&self) -> Result<()> {
        freezer::set(self.fs.as_ref(), &self.dirs, true, self.freeze_timeout)
    }

    pub fn thaw(&self) -> Result<()> {
        freezer::set(self.fs.as_ref(), &self.dirs, false, self.freeze_timeout)
    }

    pub fn freezer_state(&self) -> Result<FreezerState> {
        freezer::state(self.fs.as_ref(), &self.dirs)
    }

    pub fn stats(&self) -> Result<Stats> {
        stats::read(self.fs.as_ref(), &self.dirs)
    }

    /// An OOM watcher (v1 eventfd, v2 inotify on memory.events).
    pub fn oom_watcher(&self) -> Result<OomWatcher> {
        match &self.dirs {
            Dirs::V1(_) => OomWatcher::v1(
                self.dirs
                    .v1("memory")
                    .ok_or(Error::ControllerMissing("memory"))?,
            ),
            Dirs::V2(d) => OomWatcher::v2(d),
        }
    }

    /// Signal every process: `cgroup.kill` for SIGKILL where the kernel has
    /// it (v2, 5.14+: no fork can escape), else freeze (so none forks past
    /// us), signal, thaw. Returns how many processes were signalled.
    pub fn kill_all(&self, sig: Signal) -> Result<usize> {
        if let Dirs::V2(d) = &self.dirs {
            if sig == Signal::SIGKILL && self.fs.exists(&d.join("cgroup.kill")) {
                let n = self.pids()?.len();
                ctl::write(self.fs.as_ref(), d, "cgroup.kill", "1")?;
                return Ok(n);
            }
        }
        let frozen = self.freeze();
        if let Err(e) = &frozen {
            tracing::warn!(%e, "kill_all without a frozen cgroup");
        }
        let mut n = 0;
        let res = self.pids().map(|pids| {
            for p in pids {
                match kill(Pid::from_raw(p), sig) {
                    Ok(()) => n += 1,
                    Err(nix::Error::ESRCH) => {}
                    Err(e) => tracing::warn!(pid = p, %e, "kill failed"),
                }
            }
        });
        let thawed = self.thaw();
        res?;
        thawed?;
        Ok(n)
    }

    /// A directory fd of the container's cgroup (its exact path) for
    /// `clone3(CLONE_INTO_CGROUP)`, so the init starts in it (v2 only).
    pub fn cgroup_dir_fd(&self) -> Result<OwnedFd> {
        let Dirs::V2(d) = &self.dirs else {
            return Err(Error::Unimplemented(
                "CLONE_INTO_CGROUP needs cgroup v2".into(),
            ));
        };
        let f = std::fs::File::open(d).map_err(|e| Error::io("open", d, e))?;
        Ok(OwnedFd::from(f))
    }

    /// v1: `tasks` of every hierarchy, open for writing, for a thread that
    /// moves itself in to fork a process born in the cgroup (`birth.rs`).
    /// Empty on v2 (`cgroup_dir_fd` serves there).
    pub fn tasks_fds(&self) -> Result<Vec<OwnedFd>> {
        match &self.dirs {
            Dirs::V1(v) => crate::birth::tasks_fds(v),
            Dirs::V2(_) => Ok(Vec::new()),
        }
    }

    /// Wait until empty, then give the cgroup back: recycled or kept by
    /// the pool (v1), or removed (on v2 after detaching its device filter).
    /// A cgroup that is already gone is fine (delete is idempotent).
    pub fn destroy(&self) -> Result<Option<Released>> {
        match self.destroy_detached()? {
            Destroyed::Done(r) => Ok(r),
            Destroyed::Recycling(p) => p.finish().map(Some),
        }
    }

    /// [`CgroupManager::destroy`], but a recycle into the pool's shared
    /// slots returns as soon as the cgroup has left its path; the rest is
    /// the caller's to finish.
    pub fn destroy_detached(&self) -> Result<Destroyed> {
        let fs = self.fs.as_ref();
        let counted = self
            .live
            .as_ref()
            .is_some_and(|t| t.swap(false, Ordering::AcqRel));
        let parent = self.path.parent();
        if !self.dirs.all().iter().any(|d| fs.exists(d)) {
            if let (true, Some(pool)) = (counted, &self.pool) {
                pool.leave(&parent, pool.is_long_lived(&parent));
            }
            return Ok(Destroyed::Done(None));
        }
        if let Err(e) = tree::wait_empty(fs, &self.dirs, self.empty_timeout) {
            // Still in use: a later destroy must count it again.
            if let (true, Some(t)) = (counted, &self.live) {
                t.store(true, Ordering::Release);
            }
            return Err(e);
        }
        if let Dirs::V2(d) = &self.dirs {
            if let Err(e) = devices::clear_v2(fs, d) {
                tracing::warn!(%e, "detaching the device filter before rmdir");
            }
        }
        match &self.pool {
            Some(pool) => Ok(
                match pool.release_detached(&self.path, &self.dirs, counted)? {
                    Releasing::Done(r) => Destroyed::Done(Some(r)),
                    Releasing::Pending(p) => Destroyed::Recycling(p),
                },
            ),
            None => tree::remove_reclaiming(fs, &self.dirs, self.reclaim)
                .map(|()| Destroyed::Done(Some(Released::Removed))),
        }
    }

    /// The directory paths (leader first).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.all().into_iter().map(Path::to_path_buf).collect()
    }
}
