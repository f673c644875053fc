//! OOM notification. v1: an eventfd registered on memory.oom_control through
//! cgroup.event_control. v2: inotify on memory.events, counting oom_kill.
//!
//! The fd is non-blocking and readable when something happened, so the shim
//! can wrap it in `tokio::io::unix::AsyncFd` and call [`OomWatcher::read_events`].

use crate::ctl;
use crate::error::{Error, Result};
use crate::fs::RealFs;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

enum Kind {
    V1 {
        efd: EventFd,
        // Kept open: the registration lives as long as this fd and the eventfd.
        _oom_control: File,
    },
    V2 {
        ino: Inotify,
        last: AtomicU64,
    },
}

/// Watches one cgroup for OOM events.
pub struct OomWatcher {
    kind: Kind,
    dir: PathBuf,
}

impl std::fmt::Debug for OomWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OomWatcher")
            .field("dir", &self.dir)
            .finish()
    }
}

impl OomWatcher {
    /// Register on a v1 memory cgroup directory.
    pub fn v1(memory_dir: &Path) -> Result<Self> {
        let ctl_path = memory_dir.join("memory.oom_control");
        let oom_control = File::open(&ctl_path).map_err(|e| Error::io("open", &ctl_path, e))?;
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|source| Error::Sys {
                call: "eventfd",
                source,
            })?;
        let line = format!("{} {}", efd.as_raw_fd(), oom_control.as_raw_fd());
        ctl::write(&RealFs, memory_dir, "cgroup.event_control", &line)?;
        Ok(OomWatcher {
            kind: Kind::V1 {
                efd,
                _oom_control: oom_control,
            },
            dir: memory_dir.to_path_buf(),
        })
    }

    /// Watch memory.events of a v2 cgroup directory.
    pub fn v2(dir: &Path) -> Result<Self> {
        let sys = |call| move |source| Error::Sys { call, source };
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(sys("inotify_init1"))?;
        let file = dir.join("memory.events");
        ino.add_watch(&file, AddWatchFlags::IN_MODIFY)
            .map_err(sys("inotify_add_watch"))?;
        let start = Self::v2_count(dir)?;
        Ok(OomWatcher {
            kind: Kind::V2 {
                ino,
                last: AtomicU64::new(start),
            },
            dir: dir.to_path_buf(),
        })
    }

    fn v2_count(dir: &Path) -> Result<u64> {
        let kv = ctl::read_kv(&RealFs, dir, "memory.events")?;
        Ok(ctl::kv_get(&kv, "oom_kill").unwrap_or(0))
    }

    /// Non-blocking: the number of new OOM events (0 if the wake-up was not
    /// an OOM). [`Error::CgroupGone`] once the cgroup was removed.
    pub fn read_events(&self) -> Result<u64> {
        match &self.kind {
            Kind::V1 { efd, .. } => {
                let n = match efd.read() {
                    Ok(n) => n,
                    Err(nix::Error::EAGAIN) => return Ok(0),
                    Err(source) => {
                        return Err(Error::Sys {
                            call: "read(eventfd)",
                            source,
                        })
                    }
                };
                // The kernel also signals the eventfd when the cgroup goes away.
                if !self.dir.exists() {
                    return Err(Error::CgroupGone);
                }
                Ok(n)
            }
            Kind::V2 { ino, last } => {
                let mut gone = false;
                loop {
                    match ino.read_events() {
                        Ok(evs) => {
                            gone |= evs
                                .iter()
                                .any(|e| e.mask.contains(AddWatchFlags::IN_IGNORED));
                        }
                        Err(nix::Error::EAGAIN) => break,
                        Err(source) => {
                            return Err(Error::Sys {
                                call: "read(inotify)",
                                source,
                            })
                        }
                    }
                }
                if gone || !self.dir.exists() {
                    return Err(Error::CgroupGone);
                }
                let now = Self::v2_count(&self.dir)?;
                let before = last.swap(now, Ordering::AcqRel);
                Ok(now.saturating_sub(before))
            }
        }
    }

    /// Block until at least one OOM event, and return how many.
    pub fn wait(&self) -> Result<u64> {
        loop {
            let mut fds = [PollFd::new(self.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(source) => {
                    return Err(Error::Sys {
                        call: "poll",
                        source,
                    })
                }
            }
            let n = self.read_events()?;
            if n > 0 {
                return Ok(n);
            }
        }
    }
}

impl AsFd for OomWatcher {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.kind {
            Kind::V1 { efd, .. } => efd.as_fd(),
            Kind::V2 { ino, .. } => ino.as_fd(),
        }
    }
}

impl AsRawFd for OomWatcher {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
