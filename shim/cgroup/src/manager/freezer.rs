//! Freeze and thaw, waiting until the kernel reports the state settled.

use crate::ctl;
use crate::dirs::Dirs;
use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the freezer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezerState {
    Thawed,
    /// v1 only: some tasks are not frozen yet.
    Freezing,
    Frozen,
}

fn v1_dir(dirs: &Dirs) -> Result<&Path> {
    dirs.v1("freezer")
        .ok_or(Error::ControllerMissing("freezer"))
}

pub(crate) fn state(fs: &dyn CgroupFs, dirs: &Dirs) -> Result<FreezerState> {
    match dirs {
        Dirs::V1(_) => {
            let s = ctl::read(fs, v1_dir(dirs)?, "freezer.state")?;
            Ok(match s.trim() {
                "FROZEN" => FreezerState::Frozen,
                "FREEZING" => FreezerState::Freezing,
                _ => FreezerState::Thawed,
            })
        }
        Dirs::V2(d) => {
            let ev = ctl::read_kv(fs, d, "cgroup.events")?;
            Ok(if ctl::kv_get(&ev, "frozen") == Some(1) {
                FreezerState::Frozen
            } else {
                FreezerState::Thawed
            })
        }
    }
}

/// Set the freezer and wait for it to settle within `timeout`.
pub(crate) fn set(fs: &dyn CgroupFs, dirs: &Dirs, frozen: bool, timeout: Duration) -> Result<()> {
    let want = if frozen {
        FreezerState::Frozen
    } else {
        FreezerState::Thawed
    };
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let mut first = true;
    loop {
        // v1 can stay FREEZING when a task is in an uninterruptible sleep;
        // writing FROZEN again retries the freeze (runc does the same).
        match dirs {
            Dirs::V1(_) => ctl::write(
                fs,
                v1_dir(dirs)?,
                "freezer.state",
                if frozen { "FROZEN" } else { "THAWED" },
            )?,
            Dirs::V2(d) => {
                // v2 settles by itself: write once, then poll cgroup.events.
                if first {
                    ctl::write(fs, d, "cgroup.freeze", if frozen { "1" } else { "0" })?;
                }
            }
        }
        first = false;
        let got = state(fs, dirs)?;
        if got == want {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            if frozen {
                // Do not leave a half-frozen container behind.
                let _ = set(fs, dirs, false, Duration::from_millis(500));
            }
            return Err(Error::FreezeTimeout {
                path: dirs.procs_dir().to_path_buf(),
                state: format!("{got:?}"),
                wanted: if frozen { "FROZEN" } else { "THAWED" },
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
