//! A tracefs instance of the bench's own (`instances/<name>`) with the three
//! cgroup tracepoints on: its ring buffer, events and filter are its own, so
//! another tracer on the node neither disturbs nor is disturbed. Dropping it
//! disables the events, removes the instance and unmounts what it mounted.

use std::path::{Path, PathBuf};

/// The events counted (all in the `cgroup` subsystem).
pub const EVENTS: [&str; 3] = ["cgroup_mkdir", "cgroup_rmdir", "cgroup_rename"];
/// Per-CPU ring buffer: room for ~70k events per CPU, far more than 200
/// pods make; an overrun is counted, never hidden.
const BUFFER_KB: u64 = 8192;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no tracefs with instances at /sys/kernel/tracing or /sys/kernel/debug/tracing, and mounting one at {path} failed: {source}")]
    Mount { path: PathBuf, source: nix::Error },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> TraceError + 'a {
    move |source| TraceError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

pub struct Tracer {
    /// The instance directory.
    pub dir: PathBuf,
    /// A tracefs this bench mounted (unmounted on drop).
    mounted: Option<PathBuf>,
    /// Whether the kernel took the path filter.
    pub filtered: bool,
}

impl Tracer {
    /// Makes instance `name`, sized and filtered to paths starting with
    /// `path_prefix`, with the events on. `mount_dir` is where to mount a
    /// tracefs if the host has none mounted.
    pub fn start(name: &str, path_prefix: &str, mount_dir: &Path) -> Result<Tracer, TraceError> {
        let (root, mounted) = tracefs(mount_dir)?;
        let mut t = Tracer {
            dir: root.join("instances").join(name),
            mounted,
            filtered: false,
        };
        // From here on Drop undoes what was done.
        std::fs::create_dir(&t.dir).map_err(io("mkdir", &t.dir))?;
        t.write("buffer_size_kb", &BUFFER_KB.to_string())?;
        // A glob on the path field: the node's other cgroup work stays out.
        let filter = format!("path ~ \"{path_prefix}*\"");
        t.filtered = EVENTS.iter().all(|e| {
            t.write(&format!("events/cgroup/{e}/filter"), &filter)
                .is_ok()
        });
        for e in EVENTS {
            t.write(&format!("events/cgroup/{e}/enable"), "1")?;
        }
        t.write("tracing_on", "1")?;
        Ok(t)
    }

    fn write(&self, file: &str, val: &str) -> Result<(), TraceError> {
        let p = self.dir.join(file);
        std::fs::write(&p, val).map_err(io("write", &p))
    }

    /// Empties the ring buffer (opening `trace` with O_TRUNC).
    pub fn clear(&self) -> Result<(), TraceError> {
        self.write("trace", "")
    }

    /// The buffer's text, not consumed.
    pub fn snapshot(&self) -> Result<String, TraceError> {
        let p = self.dir.join("trace");
        std::fs::read_to_string(&p).map_err(io("read", &p))
    }

    /// Events the ring buffer lost so far (overwritten or dropped), all CPUs.
    pub fn lost(&self) -> u64 {
        let per_cpu = self.dir.join("per_cpu");
        let Ok(rd) = std::fs::read_dir(&per_cpu) else {
            return 0;
        };
        rd.flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stats")).ok())
            .map(|s| lost_in_stats(&s))
            .sum()
    }

    pub fn describe(&self) -> String {
        format!(
            "tracefs instance {} ({} KiB per CPU), events cgroup:{{{}}}{}{}",
            self.dir.display(),
            BUFFER_KB,
            EVENTS.join(","),
            if self.filtered {
                ", filtered by path in the kernel"
            } else {
                ", unfiltered (the kernel refused the path filter)"
            },
            if self.mounted.is_some() {
                ", on a tracefs the bench mounted"
            } else {
                ""
            },
        )
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        for e in EVENTS {
            let _ = self.write(&format!("events/cgroup/{e}/enable"), "0");
        }
        let _ = self.write("tracing_on", "0");
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "rund-bench: cannot remove tracefs instance {}: {e}",
                self.dir.display()
            );
        }
        if let Some(m) = self.mounted.take() {
            if let Err(e) = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH) {
                eprintln!("rund-bench: cannot unmount tracefs at {}: {e}", m.display());
            }
            let _ = std::fs::remove_dir(&m);
        }
    }
}

/// `overrun:` plus `dropped events:` of one `per_cpu/cpuN/stats`.
pub fn lost_in_stats(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|l| {
            l.strip_prefix("overrun:")
                .or_else(|| l.strip_prefix("dropped events:"))
        })
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// A mounted tracefs (root, and whether this call mounted it at `mount_dir`).
fn tracefs(mount_dir: &Path) -> Result<(PathBuf, Option<PathBuf>), TraceError> {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join("instances").is_dir() {
            return Ok((PathBuf::from(p), None));
        }
    }
    // A private mount point: nobody else sees it, and the bench's directory
    // clean-up unmounts it even if the bench dies.
    std::fs::create_dir_all(mount_dir).map_err(io("mkdir", mount_dir))?;
    nix::mount::mount(
        Some("tracefs"),
        mount_dir,
        Some("tracefs"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|source| TraceError::Mount {
        path: mount_dir.to_path_buf(),
        source,
    })?;
    Ok((mount_dir.to_path_buf(), Some(mount_dir.to_path_buf())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_overruns_and_drops() {
        // per_cpu/cpu0/stats on this kernel (6.18).
        let stats = "entries: 1\noverrun: 0\ncommit overrun: 0\nbytes: 48\n\
                     oldest event ts: 32019.144174\nnow ts: 32019.167677\n\
                     dropped events: 0\nread events: 0\n";
        assert_eq!(lost_in_stats(stats), 0);
        let stats = stats
            .replace("overrun: 0\n", "overrun: 7\n")
            .replace("dropped events: 0", "dropped events: 2");
        assert_eq!(lost_in_stats(&stats), 9, "commit overrun is no loss");
    }
}
