//! Dying memcgs: a removed memory cgroup lingers, invisible in the tree,
//! while pages (here, page cache of a file the container wrote) are still
//! charged to it. Recycling slots instead of rmdir should leave none.

use std::path::{Path, PathBuf};

use super::Variant;
use crate::ctr::{short_error, Ctr, RunMode};
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::{note_error, DyingRun};

/// How this host exposes dying cgroups.
#[derive(Debug, Clone, PartialEq)]
pub enum Counter {
    /// v1: `/proc/cgroups` counts dying memcgs, the tree does not.
    V1Memory { mount: PathBuf },
    /// v2: the root's `cgroup.stat`.
    V2 { root: PathBuf },
}

impl Counter {
    /// The memory hierarchy on v1 (hybrid included), else the v2 root.
    pub fn detect(mountinfo: &str) -> Option<Counter> {
        match rund_cgroup::Hierarchy::from_mountinfo(mountinfo).ok()? {
            h @ rund_cgroup::Hierarchy::V1 { .. } => {
                h.v1_mount("memory").map(|m| Counter::V1Memory {
                    mount: m.to_path_buf(),
                })
            }
            rund_cgroup::Hierarchy::V2 { root } => Some(Counter::V2 { root }),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Counter::V1Memory { mount } => format!(
                "memory num_cgroups in /proc/cgroups minus the directories under {}",
                mount.display()
            ),
            Counter::V2 { root } => {
                format!("nr_dying_descendants in {}/cgroup.stat", root.display())
            }
        }
    }

    pub fn count(&self) -> Option<i64> {
        match self {
            Counter::V1Memory { mount } => {
                let total = memory_num_cgroups(&std::fs::read_to_string("/proc/cgroups").ok()?)?;
                Some(total - count_dirs(mount) as i64)
            }
            Counter::V2 { root } => {
                let stat = std::fs::read_to_string(root.join("cgroup.stat")).ok()?;
                stat.lines()
                    .find_map(|l| l.strip_prefix("nr_dying_descendants "))
                    .and_then(|v| v.trim().parse().ok())
            }
        }
    }
}

/// The memory row's num_cgroups (it includes dying cgroups and the root).
pub fn memory_num_cgroups(proc_cgroups: &str) -> Option<i64> {
    proc_cgroups.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&"memory")).then(|| f.get(2)?.parse().ok())?
    })
}

/// Directories at and below `dir` (the root counts, as in num_cgroups).
fn count_dirs(dir: &Path) -> usize {
    let mut n = 1;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                n += count_dirs(&e.path());
            }
        }
    }
    n
}

/// `cycles` × `run --rm` per variant ("on" first: "off" leaves dying memcgs
/// that "on" would otherwise see being freed). Each container writes 64 KiB
/// to a host directory, so its memcg holds page cache when it is deleted.
pub(super) fn run(
    env: &BenchEnv,
    variants: &[Variant; 2],
    cycles: usize,
    progress: &Progress,
) -> Vec<DyingRun> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let counter = Counter::detect(&mountinfo);
    let mut out = Vec::new();
    for v in variants {
        progress.phase(format!(
            "rund cgroup pool {}: {cycles} create/delete cycles",
            v.name
        ));
        let mut r = DyingRun {
            variant: v.name.into(),
            cycles,
            method: counter
                .as_ref()
                .map(Counter::describe)
                .unwrap_or_else(|| "no memory cgroup found: not counted".into()),
            ..Default::default()
        };
        let dir = env.containerd.dir.join(format!("dying-{}", v.name));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            note_error(&mut r.errors, format!("mkdir {}: {e}", dir.display()));
            progress.inc(cycles as u64);
            out.push(r);
            continue;
        }
        r.before = counter.as_ref().and_then(Counter::count);
        for i in 0..cycles {
            if interrupted() {
                break;
            }
            let id = format!("rund-dying{}-{i}", v.name);
            let mut args = Ctr::run_args(
                &v.rt,
                RunMode::Rm,
                &env.rootfs,
                &id,
                &[
                    "/bin/dd",
                    "if=/dev/zero",
                    &format!("of=/tmp/{id}"),
                    "bs=64k",
                    "count=1",
                ],
            );
            args.insert(
                1,
                format!(
                    "--mount=type=bind,src={},dst=/tmp,options=rbind:rw",
                    dir.display()
                ),
            );
            if let Err(e) = env.ctr.run(&args) {
                r.failures += 1;
                note_error(&mut r.errors, short_error(&e, &id));
                let _ = env.ctr.remove_everything(&id);
            }
            progress.inc(1);
        }
        r.after = counter.as_ref().and_then(Counter::count);
        // Deleting the files uncharges their pages, so the dying memcgs can go.
        let _ = std::fs::remove_dir_all(&dir);
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
36 25 0:31 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
40 25 0:35 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";

    #[test]
    fn v1_memory_wins_over_the_hybrid_unified_mount() {
        assert_eq!(
            Counter::detect(MOUNTINFO),
            Some(Counter::V1Memory {
                mount: "/sys/fs/cgroup/memory".into()
            })
        );
        let v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            Counter::detect(v2),
            Some(Counter::V2 {
                root: "/sys/fs/cgroup".into()
            })
        );
        assert_eq!(Counter::detect("1 0 0:1 / / rw - ext4 /dev/sda rw\n"), None);
    }

    #[test]
    fn num_cgroups_of_the_memory_row() {
        let pc = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
                  cpu\t1\t36\t1\nmemory\t4\t42\t1\n";
        assert_eq!(memory_num_cgroups(pc), Some(42));
        assert_eq!(memory_num_cgroups("cpu\t1\t36\t1\n"), None);
    }
}
