//! The few /proc facts the density measure needs: parent pids, executables,
//! and RSS/PSS from smaps_rollup.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

/// Resident and proportional set sizes, and the anonymous (private,
/// written) part, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Mem {
    pub rss_kib: u64,
    pub pss_kib: u64,
    #[serde(default)]
    pub anon_kib: u64,
}

impl std::ops::AddAssign for Mem {
    fn add_assign(&mut self, o: Mem) {
        self.rss_kib += o.rss_kib;
        self.pss_kib += o.pss_kib;
        self.anon_kib += o.anon_kib;
    }
}

/// Which figure of a [`Mem`] a row shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Rss,
    Pss,
    Anon,
}

impl MemKind {
    pub const ALL: [MemKind; 3] = [MemKind::Rss, MemKind::Pss, MemKind::Anon];

    pub fn label(self) -> &'static str {
        match self {
            MemKind::Rss => "RSS",
            MemKind::Pss => "PSS",
            MemKind::Anon => "anonymous",
        }
    }

    pub fn of(self, m: &Mem) -> u64 {
        match self {
            MemKind::Rss => m.rss_kib,
            MemKind::Pss => m.pss_kib,
            MemKind::Anon => m.anon_kib,
        }
    }
}

/// Parses the `Rss:`, `Pss:` and `Anonymous:` lines of smaps_rollup.
pub fn parse_smaps_rollup(text: &str) -> Option<Mem> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.trim();
            rest.strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some(Mem {
        rss_kib: field("Rss:")?,
        pss_kib: field("Pss:")?,
        anon_kib: field("Anonymous:").unwrap_or(0),
    })
}

pub fn mem_of(pid: u32) -> Option<Mem> {
    parse_smaps_rollup(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?)
}

/// The `Threads:` count of /proc/<pid>/status.
pub fn parse_threads(status: &str) -> Option<usize> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

pub fn threads_of(pid: u32) -> Option<usize> {
    parse_threads(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Parent pid from /proc/<pid>/stat. The comm field may hold spaces and
/// parentheses, so parse after the last ')'.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

pub fn ppid_of(pid: u32) -> Option<u32> {
    parse_stat_ppid(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The process's name (`/proc/<pid>/comm`).
pub fn comm_of(pid: u32) -> Option<String> {
    let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(c.trim_end().to_string())
}

/// File name of the process's executable (readlink of /proc/<pid>/exe).
pub fn exe_name(pid: u32) -> Option<String> {
    let p = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(p.file_name()?.to_string_lossy().into_owned())
}

/// (dev, ino) of the executable, to recognise the workload binary whatever
/// mount namespace it runs in.
pub fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

pub fn file_identity(p: &Path) -> Option<(u64, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.dev(), m.ino()))
}

/// Whether the executable looks like a containerd shim (`containerd-shim-*`).
pub fn is_shim(pid: u32) -> bool {
    exe_name(pid).is_some_and(|n| n.starts_with("containerd-shim"))
}

/// Walks up from `pid` to the nearest containerd shim, as containerd-stress's
/// density mode does (there the shim is the direct parent; with rund an agent
/// may sit in between).
pub fn shim_of(pid: u32) -> Option<u32> {
    let mut cur = pid;
    for _ in 0..16 {
        cur = ppid_of(cur)?;
        if cur <= 1 {
            return None;
        }
        if is_shim(cur) {
            return Some(cur);
        }
    }
    None
}

/// CPU time a thread has run, ns: the first field of its schedstat.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Each live thread of `pid` and the CPU time it has run, ns. A thread
/// that has ended is not listed: callers compare the thread sets.
pub fn thread_cpu_ns(pid: u32) -> Option<HashMap<u32, u64>> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ns) = std::fs::read_to_string(e.path().join("schedstat"))
            .ok()
            .as_deref()
            .and_then(parse_schedstat)
        {
            out.insert(tid, ns);
        }
    }
    Some(out)
}

/// parent -> children for every live process.
pub fn children_map() -> HashMap<u32, Vec<u32>> {
    let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return m;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(pp) = ppid_of(pid) {
            m.entry(pp).or_default().push(pid);
        }
    }
    m
}

/// All descendants of `root` (not `root` itself).
pub fn descendants(root: u32, children: &HashMap<u32, Vec<u32>>) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            out.push(c);
            stack.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rollup() {
        let t = "56371b658000-7ffeec6f0000 ---p 00000000 00:00 0   [rollup]\n\
                 Rss:                1780 kB\nPss:                 243 kB\nPss_Dirty: 112 kB\n\
                 Anonymous:           96 kB\n";
        assert_eq!(
            parse_smaps_rollup(t),
            Some(Mem {
                rss_kib: 1780,
                pss_kib: 243,
                anon_kib: 96,
            })
        );
        assert_eq!(parse_smaps_rollup("Rss: 1 kB\n"), None);
    }

    #[test]
    fn parses_schedstat_and_reads_own_threads() {
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123456));
        assert_eq!(parse_schedstat(""), None);
        let me = std::process::id();
        let threads = thread_cpu_ns(me).unwrap();
        assert!(threads.get(&me).is_some_and(|&ns| ns > 0), "{threads:?}");
    }

    #[test]
    fn parses_threads() {
        assert_eq!(parse_threads("Name:\tx\nThreads:\t3\nSigQ: 0/1\n"), Some(3));
        assert_eq!(parse_threads("Name: x\n"), None);
    }

    #[test]
    fn parses_ppid_with_odd_comm() {
        assert_eq!(parse_stat_ppid("42 (a) b (c)) S 7 42 42 0"), Some(7));
        assert_eq!(parse_stat_ppid("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert_eq!(ppid_of(me), Some(std::os::unix::process::parent_id()));
        let m = mem_of(me).expect("smaps_rollup of self");
        assert!(m.rss_kib > 0);
        assert!(!is_shim(me));
        assert!(threads_of(me).unwrap() >= 1);
        let kids = children_map();
        assert!(descendants(std::os::unix::process::parent_id(), &kids).contains(&me));
    }
}
