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
    /// Detect the host layout, use the real cgroupfs, and start the refiller
    /// when the pool is on.
    pub fn new(cfg: CgroupConfig) -> Result<Self> {
        let me = Self::with(Hierarchy::detect()?, Arc::new(RealFs), cfg);
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
        if self.cfg.pool == Switch::On {
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

    fn pool_on(&self) -> bool {
        self.cfg.pool == Switch::On
    }

    fn manager(&self, path: CgroupPath, dirs: Dirs, pooled: bool) -> CgroupManager {
        CgroupManager {
            fs: self.fs.clone(),
            path,
            dirs,
            pool: self.pool_on().then(|| self.pool.clone()),
            pooled,
            empty_timeout: Duration::from_millis(self.cfg.empty_timeout_ms),
            freeze_timeout: Duration::from_millis(self.cfg.freeze_timeout_ms),
        }
    }

    /// Create the container's cgroup (claimed from the pool when on, else
    /// mkdir) and apply `res` (device rules deny-by-default on v1 even when
    /// `res` is `None`). On any error nothing is left behind.
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
            self.pool.claim(&path)?
        } else {
            None
        };
        let pooled = claimed.is_some();
        let (dirs, mode) = match claimed {
            Some(c) if c.devices_baseline => (c.dirs, Mode::CreateOnBaseline),
            Some(c) => (c.dirs, Mode::Create),
            None => (
                tree::create_leaf(self.fs.as_ref(), &self.hier, &path.rel())?,
                Mode::Create,
            ),
        };
        let mgr = self.manager(path, dirs, pooled);
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
        let slot = if self.hier.is_v2() {
            crate::pool::mapped_slot(&self.pool, &path)?
        } else {
            None
        };
        let pooled = slot.is_some();
        let dirs = match slot {
            Some(d) => Dirs::V2(d),
            None => Dirs::of(&self.hier, &path.rel()),
        };
        if !dirs.all().iter().any(|d| self.fs.exists(d)) {
            return Err(Error::NotFound(path.rel()));
        }
        Ok(self.manager(path, dirs, pooled))
    }

    /// `rund pool status`.
    pub fn pool_status(&self) -> Result<Vec<PoolStatus>> {
        self.pool.status()
    }

    /// `rund pool warm`: fill the pool under `parent` (a cgroupsPath parent
    /// such as `/k8s.io`) up to `slots` free slots, capped at high water.
    /// Returns the number of slots made.
    pub fn pool_warm(&self, parent: &str, slots: usize) -> Result<usize> {
        if !self.pool_on() {
            return Err(Error::PoolOff);
        }
        let rel = CgroupPath::parse(parent)?.rel();
        self.pool.warm(&rel, slots)
    }

    /// `rund pool gc` (`drain` also removes every free slot).
    pub fn pool_gc(&self, drain: bool) -> Result<GcReport> {
        self.pool.gc(drain)
    }
}
