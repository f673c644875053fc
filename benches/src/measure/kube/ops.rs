//! The kernel's cgroup tracepoints (`cgroup:cgroup_mkdir`, `cgroup_rmdir`,
//! `cgroup_rename`) as tracefs prints them, and whose work each one was: the
//! runtime's inside this run's pod cgroups, or the bench's own (the pod
//! cgroups and their parents, made and removed as the kubelet does).

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Mkdir,
    Rmdir,
    Rename,
}

impl Op {
    fn index(self) -> usize {
        self as usize
    }
}

/// One cgroup event. `path` is relative to its hierarchy's root; a rename
/// shows the new name.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub op: Op,
    /// The thread that made the call (the comm column may be `<...>`).
    pub tid: i32,
    /// The hierarchy id (0: the v2 hierarchy).
    pub root: i32,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Event(Event),
    /// `CPU:1 [LOST 12 EVENTS]`: the ring buffer overwrote events.
    Lost(u64),
    /// Headers, markers, other events.
    Other,
}

/// One line of the `trace` (or `trace_pipe`) file.
pub fn parse_line(line: &str) -> Line {
    if let Some(n) = line
        .split_once("[LOST ")
        .and_then(|(_, r)| r.split_once(" EVENTS]"))
        .and_then(|(n, _)| n.trim().parse().ok())
    {
        return Line::Lost(n);
    }
    let found = [
        (": cgroup_mkdir: ", Op::Mkdir),
        (": cgroup_rmdir: ", Op::Rmdir),
        (": cgroup_rename: ", Op::Rename),
    ]
    .into_iter()
    .find_map(|(tag, op)| line.split_once(tag).map(|(h, p)| (h, p, op)));
    let Some((head, payload, op)) = found else {
        return Line::Other;
    };
    // head: `  comm-tid   [cpu] flags timestamp`; comm may hold '-' and spaces.
    let tid = head
        .rsplit_once(" [")
        .and_then(|(task, _)| task.trim().rsplit_once('-'))
        .and_then(|(_, tid)| tid.parse().ok());
    // payload: `root=4 id=3069167 level=1 path=/a b/c` (path runs to the end).
    let root = payload
        .split_whitespace()
        .find_map(|f| f.strip_prefix("root="))
        .and_then(|r| r.parse().ok());
    let path = payload.split_once("path=").map(|(_, p)| p.to_string());
    match (tid, root, path) {
        (Some(tid), Some(root), Some(path)) => Line::Event(Event {
            op,
            tid,
            root,
            path,
        }),
        _ => Line::Other,
    }
}

/// What one run's events are matched against.
pub struct Scope<'a> {
    /// The pods' parent, as a hierarchy-relative path
    /// (`/rit-x-pods/kubepods/besteffort`).
    pub top: &'a str,
    /// This run's pod cgroup names (`pod<uid>`), children of `top`.
    pub pods: &'a HashSet<String>,
    /// Threads of the bench that make and remove the pod cgroups.
    pub bench_tids: &'a HashSet<i32>,
}

/// Counts of one run, over every hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpCounts {
    /// The runtime's work in this run's pod cgroups (the pod's own
    /// directory included where the runtime made or removed it).
    pub mkdir: u64,
    pub rmdir: u64,
    pub rename: u64,
    /// The bench's own mkdir/rmdir of the pod cgroups and their parents.
    pub bench_mkdir: u64,
    pub bench_rmdir: u64,
    /// Not the bench's, on the pods' parent or above it: shared by all pods.
    pub above_pods: u64,
    /// In pod cgroups of another run (late work of an earlier run).
    pub other_runs: u64,
    /// Events the kernel reported lost in this run's window.
    pub lost: u64,
    /// Hierarchy id → [mkdir, rmdir, rename] of the runtime's work.
    pub by_root: BTreeMap<i32, [u64; 3]>,
}

impl OpCounts {
    pub fn add(&mut self, e: &Event, scope: &Scope) {
        let bench = scope.bench_tids.contains(&e.tid);
        if e.path == scope.top || is_ancestor(&e.path, scope.top) {
            return self.bench_or_above(e, bench);
        }
        let Some(rest) = e
            .path
            .strip_prefix(scope.top)
            .and_then(|r| r.strip_prefix('/'))
        else {
            return; // elsewhere, or a sibling of top sharing its prefix
        };
        let (pod, below) = match rest.split_once('/') {
            Some((p, _)) => (p, true),
            None => (rest, false),
        };
        if !scope.pods.contains(pod) {
            self.other_runs += 1;
        } else if !below && bench {
            self.bench(e);
        } else {
            match e.op {
                Op::Mkdir => self.mkdir += 1,
                Op::Rmdir => self.rmdir += 1,
                Op::Rename => self.rename += 1,
            }
            self.by_root.entry(e.root).or_default()[e.op.index()] += 1;
        }
    }

    fn bench_or_above(&mut self, e: &Event, bench: bool) {
        if bench {
            self.bench(e)
        } else {
            self.above_pods += 1;
        }
    }

    fn bench(&mut self, e: &Event) {
        match e.op {
            Op::Mkdir => self.bench_mkdir += 1,
            Op::Rmdir => self.bench_rmdir += 1,
            Op::Rename => self.above_pods += 1,
        }
    }
}

/// `anc` is a strict ancestor directory of `path`.
fn is_ancestor(anc: &str, path: &str) -> bool {
    path.strip_prefix(anc)
        .is_some_and(|r| r.starts_with('/') || anc.ends_with('/'))
}

/// Counts every line of a trace snapshot, plus `lost` reported apart
/// (the per-CPU overrun counters).
pub fn count(text: &str, scope: &Scope, lost: u64) -> OpCounts {
    let mut c = OpCounts {
        lost,
        ..Default::default()
    };
    for l in text.lines() {
        match parse_line(l) {
            Line::Event(e) => c.add(&e, scope),
            Line::Lost(n) => c.lost += n,
            Line::Other => {}
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    // Taken from this kernel (6.18) with the three events enabled in an instance.
    const REAL: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 5/5   #P:2
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
           mkdir-11493   [001] d..1. 32019.140050: cgroup_mkdir: root=4 id=3069167 level=1 path=/kbtest-x
              mv-11494   [000] d..1. 32019.144174: cgroup_rename: root=4 id=3069167 level=1 path=/kbtest-y
           rmdir-11495   [001] d..1. 32019.148178: cgroup_rmdir: root=4 id=3069167 level=1 path=/kbtest-y
           <...>-16074   [001] ...1. 32124.392288: tracing_mark_write: hello
";

    #[test]
    fn real_lines_parse() {
        let lines: Vec<Line> = REAL.lines().map(parse_line).collect();
        assert_eq!(lines[0], Line::Other);
        assert_eq!(
            lines[4],
            Line::Event(Event {
                op: Op::Mkdir,
                tid: 11493,
                root: 4,
                path: "/kbtest-x".into()
            })
        );
        assert!(matches!(&lines[5], Line::Event(e) if e.op == Op::Rename && e.path == "/kbtest-y"));
        assert!(matches!(&lines[6], Line::Event(e) if e.op == Op::Rmdir && e.tid == 11495));
        assert_eq!(lines[7], Line::Other, "a marker is no cgroup event");
    }

    #[test]
    fn odd_comms_paths_and_lost_lines() {
        let l = "  containerd-shim-1234   [000] ..... 1.0: cgroup_mkdir: root=0 id=9 level=3 path=/a b/c";
        assert!(
            matches!(parse_line(l), Line::Event(e) if e.tid == 1234 && e.path == "/a b/c" && e.root == 0)
        );
        let l =
            "           <...>-77   [001] d..1. 5.5: cgroup_rmdir: root=7 id=1 level=2 path=/x/y";
        assert!(matches!(parse_line(l), Line::Event(e) if e.tid == 77));
        assert_eq!(parse_line("CPU:1 [LOST 12 EVENTS]"), Line::Lost(12));
        assert_eq!(
            parse_line("  x-1 [000] ..... 1.0: cgroup_mkdir: id=9 level=3 path=/a"),
            Line::Other,
            "no root field"
        );
    }

    fn line(tid: i32, op: &str, path: &str) -> String {
        format!("  t-{tid} [000] d..1. 1.0: cgroup_{op}: root=3 id=1 level=4 path={path}\n")
    }

    #[test]
    fn counts_only_this_runs_pods_and_sets_the_bench_apart() {
        let top = "/rit-a-pods/kubepods/besteffort";
        let pods: HashSet<String> = ["podA".to_string(), "podB".to_string()].into();
        let bench: HashSet<i32> = [1].into();
        let scope = Scope {
            top,
            pods: &pods,
            bench_tids: &bench,
        };
        let mut t = String::new();
        // The bench: the parents once, each pod dir, then their removal.
        t += &line(1, "mkdir", "/rit-a-pods/kubepods");
        t += &line(1, "mkdir", top);
        t += &line(1, "mkdir", &format!("{top}/podA"));
        t += &line(1, "rmdir", &format!("{top}/podA"));
        // The runtime in podA and podB.
        t += &line(50, "mkdir", &format!("{top}/podA/sandbox"));
        t += &line(50, "mkdir", &format!("{top}/podA/.rund-pool-1"));
        t += &line(51, "rename", &format!("{top}/podA/ctr"));
        t += &line(52, "rmdir", &format!("{top}/podB/ctr"));
        // A runtime making a pod dir the bench did not (another hierarchy).
        t += &line(53, "mkdir", &format!("{top}/podB"));
        // Another run's pod, a sibling of top, and someone else's cgroup.
        t += &line(54, "rmdir", &format!("{top}/podZ/ctr"));
        t += &line(55, "mkdir", &format!("{top}x/podA/ctr"));
        t += &line(56, "mkdir", "/system.slice/foo");
        // The runtime above the pods (e.g. runc's mkdir -p of parents).
        t += &line(57, "mkdir", "/rit-a-pods");
        t += "CPU:0 [LOST 3 EVENTS]\n";
        let c = count(&t, &scope, 2);
        assert_eq!((c.mkdir, c.rmdir, c.rename), (3, 1, 1), "{c:?}");
        assert_eq!((c.bench_mkdir, c.bench_rmdir), (3, 1), "{c:?}");
        assert_eq!((c.other_runs, c.above_pods, c.lost), (1, 1, 5), "{c:?}");
        assert_eq!(c.by_root.get(&3), Some(&[3, 1, 1]));
    }
}
