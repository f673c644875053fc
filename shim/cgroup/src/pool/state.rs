//! The pool's on-disk state, shared by every shim on the node: one directory
//! per long-lived parent under the state dir, with two lock files, counters
//! and what the parent is. gc removes it once the parent is gone.

use crate::error::{Error, Result};
use crate::path::escape_key;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Counters of one pool, kept in `counters.json` under `counters.lock`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Refill runs that created at least one slot.
    pub refills: u64,
    /// Slots created by refills.
    pub slots_created: u64,
    /// Cgroups renamed (v1) or released (v2) back into the pool.
    pub recycles: u64,
    /// Cgroups removed instead of recycled (past high water, or reset failed).
    pub removed: u64,
    /// Stale pieces removed by gc.
    pub gc_removed: u64,
}

/// What a parent's state dir remembers about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Meta {
    /// The parent, relative to the hierarchy roots.
    pub rel: PathBuf,
    /// `rund pool warm` made it long-lived (else it came from the config).
    #[serde(default)]
    pub warmed: bool,
}

/// The state directory of one pooled parent.
#[derive(Debug, Clone)]
pub(crate) struct ParentState {
    pub dir: PathBuf,
}

fn state_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::State {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl ParentState {
    /// `leader_parent` (an absolute cgroup dir) names the pool uniquely.
    pub fn open(state_dir: &Path, leader_parent: &Path, rel: &Path) -> Result<Self> {
        let dir = state_dir.join(Self::key(leader_parent));
        let st = ParentState { dir };
        if !st.dir.join("meta.json").exists() {
            std::fs::create_dir_all(&st.dir).map_err(|e| state_err(&st.dir, e))?;
            st.write_meta(&Meta {
                rel: rel.to_path_buf(),
                warmed: false,
            })?;
        }
        sweep_stale_tmp(&st.dir);
        Ok(st)
    }

    /// The state dir of `leader_parent` if there is one (never creates it).
    pub fn existing(state_dir: &Path, leader_parent: &Path) -> Option<Self> {
        let dir = state_dir.join(Self::key(leader_parent));
        dir.join("meta.json")
            .exists()
            .then_some(ParentState { dir })
    }

    /// Removes the temp files dead writers left in the state dir of
    /// `leader_parent`, if it has one (never creates it).
    pub fn sweep_stale_at(state_dir: &Path, leader_parent: &Path) {
        sweep_stale_tmp(&state_dir.join(Self::key(leader_parent)));
    }

    fn key(leader_parent: &Path) -> String {
        let mut key = escape_key(&leader_parent.to_string_lossy());
        if key.len() > 200 {
            let h = key.bytes().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
            key = format!("{}-{h:016x}", &key[..150]);
        }
        key
    }

    pub fn write_meta(&self, meta: &Meta) -> Result<()> {
        let text = serde_json::to_string(meta).map_err(|e| state_err(&self.dir, e))?;
        write_atomic(&self.dir.join("meta.json"), text.as_bytes())
    }

    /// Remove the whole state dir (its parent cgroup is gone).
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(state_err(&self.dir, e)),
            _ => Ok(()),
        }
    }

    pub fn meta(dir: &Path) -> Result<Meta> {
        let p = dir.join("meta.json");
        let text = std::fs::read_to_string(&p).map_err(|e| state_err(&p, e))?;
        serde_json::from_str(&text).map_err(|e| state_err(&p, e))
    }

    fn lock_file(&self, name: &str, arg: FlockArg) -> Result<Option<Flock<File>>> {
        let p = self.dir.join(name);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| state_err(&p, e))?;
        match Flock::lock(f, arg) {
            Ok(l) => Ok(Some(l)),
            Err((_, nix::Error::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(state_err(&p, e)),
        }
    }

    /// The refill lock, or `None` if another process is refilling.
    pub fn try_refill_lock(&self) -> Result<Option<Flock<File>>> {
        self.lock_file("refill.lock", FlockArg::LockExclusiveNonblock)
    }

    /// The refill lock, waiting for it (gc).
    pub fn refill_lock(&self) -> Result<Flock<File>> {
        self.lock_file("refill.lock", FlockArg::LockExclusive)
            .and_then(|l| l.ok_or_else(|| state_err(&self.dir, "lock not taken")))
    }

    pub fn counters(&self) -> Counters {
        std::fs::read_to_string(self.dir.join("counters.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Update the counters under their own lock (never the refill lock, so a
    /// long refill does not hold up a delete).
    pub fn bump(&self, f: impl FnOnce(&mut Counters)) -> Result<()> {
        let _l = self.lock_file("counters.lock", FlockArg::LockExclusive)?;
        let mut c = self.counters();
        f(&mut c);
        let text = serde_json::to_string(&c).map_err(|e| state_err(&self.dir, e))?;
        write_atomic(&self.dir.join("counters.json"), text.as_bytes())
    }
}

/// Write to a temp file and rename over `path`.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = tmp_name(path);
    std::fs::write(&tmp, data)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            state_err(path, e)
        })
}

/// Removes temp files whose writer died between write and rename (a shim
/// killed mid-update): their name carries the writer's pid.
fn sweep_stale_tmp(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = tmp_writer(&name.to_string_lossy()) else {
            continue;
        };
        // A zombie counts as dead: a killed shim stays one until it is reaped.
        if rund_sys::procfs::start_time(pid as i32).is_none() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The writer pid of a temp file made by [`tmp_name`].
fn tmp_writer(name: &str) -> Option<u32> {
    let (_, suffix) = name.rsplit_once(".tmp-")?;
    u32::from_str_radix(suffix.split('-').next()?, 16).ok()
}

fn tmp_name(path: &Path) -> PathBuf {
    let n = crate::pool::unique_suffix();
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".tmp-{n}"));
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parents_state_is_swept_by_its_leader_dir_and_never_made() {
        let d = tempfile::tempdir().unwrap();
        let leader = Path::new("/sys/fs/cgroup/blkio/k8s.io");
        let dir = d.path().join(ParentState::key(leader));
        std::fs::create_dir(&dir).unwrap();
        // Killed before its first meta.json was renamed into place.
        let dead = dir.join("meta.json.tmp-7ffffffe-1-0");
        std::fs::write(&dead, "x").unwrap();
        ParentState::sweep_stale_at(d.path(), leader);
        assert!(!dead.exists(), "a dead writer's temp file goes");
        let other = Path::new("/sys/fs/cgroup/blkio/other");
        ParentState::sweep_stale_at(d.path(), other);
        assert!(!d.path().join(ParentState::key(other)).exists());
    }

    #[test]
    fn temp_files_of_dead_writers_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let mine = tmp_name(&d.path().join("counters.json"));
        std::fs::write(&mine, "x").unwrap();
        let dead = d.path().join("meta.json.tmp-7ffffffe-1-0");
        std::fs::write(&dead, "x").unwrap();
        std::fs::write(d.path().join("meta.json"), "{}").unwrap();
        assert_eq!(tmp_writer("meta.json.tmp-7ffffffe-1-0"), Some(0x7fff_fffe));
        assert_eq!(tmp_writer("meta.json"), None);
        sweep_stale_tmp(d.path());
        assert!(mine.exists(), "a live writer's temp file stays");
        assert!(!dead.exists(), "a dead writer's temp file goes");
        assert!(d.path().join("meta.json").exists());
    }

    #[test]
    fn a_zombie_writer_counts_as_dead() {
        // An unreaped child: its /proc entry stays until we wait for it.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        while rund_sys::procfs::stat(pid as i32).is_some_and(|s| !s.is_dead()) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        let d = tempfile::tempdir().unwrap();
        let tmp = d.path().join(format!("meta.json.tmp-{pid:x}-1-0"));
        std::fs::write(&tmp, "x").unwrap();
        sweep_stale_tmp(d.path());
        let _ = child.wait();
        assert!(
            !tmp.exists(),
            "a killed shim's temp file goes before it is reaped"
        );
    }
}
