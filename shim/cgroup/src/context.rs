//! The per-process entry point: host layout, fs seam, config and pool.

use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::{CgroupFs, CountingFs, FsCounts, RealFs};
use crate::hierarchy::Hierarchy;
use crate::manager::CgroupManager;
use crate::path::CgroupPath;
use crate::pool::{CgroupConfig, GcReport, Pool, PoolStatus, Switch};
use crate::resources::{self, Mode};
use crate::tree;
use oci_spec::runtime::LinuxResources;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Create one per shim process and share it (it is `Send + Sync`).
#[derive(Debug)]
pub struct Cgroups {
    hier: Hierarchy,
    fs: Arc<CountingFs>,
    cfg: CgroupConfig,
    /// Always present so status/gc work; used for claims only when on.
    pool: Arc<Pool>,
}

impl Cgroups {
    /// Detect the host layout, use the real cgroupfs, and allow the refiller
    /// when the pool is on (v1; its thread starts on the first request).
    pub fn new(cfg: CgroupConfig) -> Result<Self> {
        cfg.validate()?;
        let hier = Hierarchy::detect_remembered(&cfg.state_dir)?;
        let me = Self::with(hier, Arc::new(RealFs), cfg);
        me.start_refiller();
        Ok(me)
    }

    /// Explicit layout and fs (tests, benches). No refiller is started.
    pub fn with(hier: Hierarchy, fs: Arc<dyn CgroupFs>, cfg: CgroupConfig) -> Self {
        let fs = Arc::new(CountingFs::new(fs));
        let pool = Arc::new(Pool::new(hier.clone(), fs.clone(), cfg.clone()));
        Cgroups {
            hier,
            fs,
            cfg,
            pool,
        }
    }

    pub fn start_refiller(&self) {
        if self.pool_on() {
            self.pool.start_refiller();
        }
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hier
    }

    pub fn config(&self) -> &CgroupConfig {
        &self.cfg
    }

    /// mkdir/rmdir/rename/write calls made through this context so far.
    pub fn fs_counts(&self) -> FsCounts {
        self.fs.counts()
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The pool works by rename, which only v1 allows.
    pub fn pool_on(&self) -> bool {
        self.cfg.pool == Switch::On && !self.hier.is_v2()
    }

    fn manager(&self, path: CgroupPath, dirs: Dirs, pooled: bool, counted: bool) -> CgroupManager {
        CgroupManager {
            fs: self.fs.clone(),
            path,
            dirs,
            pool: self.pool_on().then(|| self.pool.clone()),
            pooled,
            live: (counted && self.pool_on()).then(|| Arc::new(AtomicBool::new(true))),
            reclaim: self.cfg.reclaim_on_remove,
            empty_timeout: Duration::from_millis(self.cfg.empty_timeout_ms),
            freeze_timeout: Duration::from_millis(self.cfg.freeze_timeout_ms),
        }
    }

    /// v1 with the pool on: a kept cgroup of this process in the parent
    /// (not long-lived), else a shared slot (long-lived parent), else none.
    fn take_from_pool(&self, path: &CgroupPath) -> Result<Option<crate::pool::Claim>> {
        let parent = path.parent();
        let long = self.pool.is_long_lived(&parent);
        if let Some(old) = self.pool.enter(&parent, path.name(), long) {
            match self.pool.claim_kept(path, &old) {
                Ok(c) => return Ok(Some(c)),
                Err(e) => tracing::warn!(%e, "kept cgroup unusable; making a new one"),
            }
        }
        if !long {
            return Ok(None);
        }
        self.pool
            .claim(path)
            .inspect_err(|_| self.pool.leave(&parent, true))
    }

    /// Create the container's cgroup at exactly its cgroupsPath (on v1 with
    /// the pool on, by renaming a pooled or kept cgroup there, else mkdir)
    /// and apply `res` (device rules deny-by-default even when `res` is
    /// `None`). On any error nothing is left behind.
    pub fn create(
        &self,
        cgroups_path: &str,
        res: Option<&LinuxResources>,
    ) -> Result<CgroupManager> {
        let path = CgroupPath::parse(cgroups_path)?;
        let empty = LinuxResources::default();
        let res = res.unwrap_or(&empty);
        // Refuse bad input before touching the tree.
        resources::validate(res)?;
        let claimed = if self.pool_on() {
            self.take_from_pool(&path)?
        } else {
            None
        };
        let pooled = claimed.is_some();
        let (dirs, mode) = match claimed {
            Some(c) if c.devices_baseline => (c.dirs, Mode::CreateOnBaseline),
            Some(c) => (c.dirs, Mode::Create),
            None => match tree::create_leaf(self.fs.as_ref(), &self.hier, &path.rel()) {
                Ok(d) => (d, Mode::Create),
                Err(e) => {
                    if self.pool_on() {
                        let parent = path.parent();
                        self.pool.leave(&parent, self.pool.is_long_lived(&parent));
                    }
                    return Err(e);
                }
            },
        };
        let mgr = self.manager(path, dirs, pooled, true);
        if let Err(e) = resources::apply(self.fs.as_ref(), &mgr.dirs, res, mode) {
            if let Err(e2) = mgr.destroy() {
                tracing::warn!(%e2, "cleanup after a failed apply");
            }
            return Err(e);
        }
        Ok(mgr)
    }

    /// The cgroup of an existing container (another process made it, e.g.
    /// for `shim delete`). [`Error::NotFound`] if it exists nowhere.
    pub fn load(&self, cgroups_path: &str) -> Result<CgroupManager> {
        let path = CgroupPath::parse(cgroups_path)?;
        let dirs = Dirs::of(&self.hier, &path.rel());
        let all = dirs.all();
        if !all.iter().any(|d| self.fs.exists(d)) {
            return Err(Error::NotFound(path.rel()));
        }
        // v1: followers that carry the name of a live shim's kept cgroup
        // are that shim's, not a container's.
        if !self.hier.is_v2()
            && !self.fs.exists(all[0])
            && self.pool.kept_elsewhere(&path.parent(), path.name())
        {
            return Err(Error::NotFound(path.rel()));
        }
        Ok(self.manager(path, dirs, false, false))
    }

    /// After a shim crash (`shim delete`): the temp files a killed writer
    /// left in the pool's state for this path's parent are removed. A shim
    /// may be killed while it writes that state at any point of a Create,
    /// its cgroup head start included.
    pub fn sweep_crash_leftovers(&self, cgroups_path: &str) {
        if let Ok(path) = CgroupPath::parse(cgroups_path) {
            self.pool.sweep_stale(&path.parent());
        }
    }

    /// `rund pool status`.
    pub fn pool_status(&self) -> Result<Vec<PoolStatus>> {
        self.pool.status()
    }

    /// `rund pool warm`: fill the pool under `parent` (a cgroupsPath parent
    /// such as `/k8s.io`) up to `slots` free slots, capped at high water.
    /// Returns the number of slots made.
    pub fn pool_warm(&self, parent: &str, slots: usize) -> Result<usize> {
        if self.cfg.pool == Switch::Off {
            return Err(Error::PoolOff);
        }
        let rel = CgroupPath::parse(parent)?.rel();
        // v2: refused with the reason (no rename, so no pool).
        self.pool.warm(&rel, slots)
    }

    /// `rund pool gc` (`drain` also removes every free slot).
    pub fn pool_gc(&self, drain: bool) -> Result<GcReport> {
        self.pool.gc(drain)
    }
}
