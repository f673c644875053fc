//! Where a start's CPU time goes, by who spends it: the client (ctr and the
//! bench that spawns it), containerd itself, the runtime's processes outside
//! the containers' cgroups (shims, rund's agents), the containers' cgroups,
//! and the rest of the machine (kernel threads: cgroup and namespace
//! teardown, RCU; anything else running).
//!
//! containerd is moved into a cpuacct cgroup of its own when the bench
//! starts, so everything it spawns is charged there; its own threads are read
//! from `/proc/<pid>/task/*/schedstat`. The containers' cgroups are under
//! `/<namespace>` (ctr's default cgroupsPath), which keeps the time of
//! removed children. Counters are ns or µs except the machine's (`/proc/stat`,
//! clock ticks), which is why a single sample's "elsewhere" is coarse and
//! only its mean over many samples is reported.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// A cgroup's CPU time counter.
#[derive(Debug, Clone)]
enum Usage {
    /// `cpuacct.usage`, ns.
    V1(PathBuf),
    /// `cpu.stat`'s `usage_usec`.
    V2(PathBuf),
}

impl Usage {
    fn read_us(&self) -> Option<u64> {
        match self {
            Usage::V1(d) => {
                Some(read(&d.join("cpuacct.usage"))?.trim().parse::<u64>().ok()? / 1000)
            }
            Usage::V2(d) => parse_usage_usec(&read(&d.join("cpu.stat"))?),
        }
    }

    fn dir(&self) -> &Path {
        match self {
            Usage::V1(d) | Usage::V2(d) => d,
        }
    }
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn parse_usage_usec(cpu_stat: &str) -> Option<u64> {
    cpu_stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))?
        .trim()
        .parse()
        .ok()
}

/// Busy time of the whole machine from `/proc/stat`'s `cpu` line, in clock
/// ticks: user, nice, system, irq and softirq (guest time is inside user;
/// idle, iowait and steal are not busy).
fn parse_machine_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    Some([0, 1, 2, 5, 6].iter().filter_map(|&i| v.get(i)).sum())
}

/// The first field of `schedstat`: time on a CPU, ns.
fn parse_schedstat_ns(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// A process's CPU time over its live threads, µs.
fn process_us(pid: u32) -> Option<u64> {
    let mut ns = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        // A thread gone meanwhile is skipped (its time is then counted as
        // the runtime's: the cgroup still has it).
        if let Some(t) = read(&e.path().join("schedstat")).and_then(|s| parse_schedstat_ns(&s)) {
            ns += t;
        }
    }
    Some(ns / 1000)
}

fn rusage_us(who: libc::c_int) -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes it.
    let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: getrusage succeeded, so it filled `ru` (zeroed before anyway).
    let ru = unsafe { ru.assume_init() };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// The counters at one instant, µs (the machine's in ticks).
#[derive(Debug, Clone, Copy, Default)]
pub struct Snap {
    client: u64,
    containerd: u64,
    host_cg: u64,
    pods_cg: u64,
    machine_ticks: u64,
}

/// CPU time per pod over a span, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuSplit {
    /// Pods the span's time is divided by.
    pub pods: usize,
    /// ctr processes and the bench's own threads.
    pub client_ms: f64,
    /// containerd's threads.
    pub containerd_ms: f64,
    /// In containerd's cgroup but not containerd: shims, rund's agents and
    /// launchers, runc (each until it joins a container's cgroup).
    pub runtime_ms: f64,
    /// In the containers' cgroups: inits, workloads, runc init.
    pub containers_ms: f64,
    /// The machine's busy time less the above (kernel threads, softirqs,
    /// anything else running); coarse: `/proc/stat` counts in ticks.
    pub elsewhere_ms: f64,
}

impl CpuSplit {
    pub fn total_ms(&self) -> f64 {
        self.client_ms
            + self.containerd_ms
            + self.runtime_ms
            + self.containers_ms
            + self.elsewhere_ms
    }

    /// Adds another span's per-pod figures, weighted by its pods.
    pub fn add(&mut self, o: &CpuSplit) {
        let (a, b) = (self.pods as f64, o.pods as f64);
        let n = a + b;
        if n == 0.0 {
            return;
        }
        let mix = |x: f64, y: f64| (x * a + y * b) / n;
        *self = CpuSplit {
            pods: self.pods + o.pods,
            client_ms: mix(self.client_ms, o.client_ms),
            containerd_ms: mix(self.containerd_ms, o.containerd_ms),
            runtime_ms: mix(self.runtime_ms, o.runtime_ms),
            containers_ms: mix(self.containers_ms, o.containers_ms),
            elsewhere_ms: mix(self.elsewhere_ms, o.elsewhere_ms),
        };
    }
}

/// The span from `a` to `b` divided by `pods`; `None` if a counter went
/// backwards (a cgroup was removed and made again meanwhile).
pub fn split(a: &Snap, b: &Snap, pods: usize, tick_us: u64) -> Option<CpuSplit> {
    if pods == 0 {
        return None;
    }
    let d = |x: u64, y: u64| y.checked_sub(x);
    let client = d(a.client, b.client)?;
    let containerd = d(a.containerd, b.containerd)?;
    let host = d(a.host_cg, b.host_cg)?;
    let pods_cg = d(a.pods_cg, b.pods_cg)?;
    let machine = d(a.machine_ticks, b.machine_ticks)? * tick_us;
    let per = |us: f64| us / 1000.0 / pods as f64;
    // A thread of containerd that ended keeps its time in the cgroup only.
    let runtime = host.saturating_sub(containerd);
    let elsewhere = machine as f64 - (client + host + pods_cg) as f64;
    Some(CpuSplit {
        pods,
        client_ms: per(client as f64),
        containerd_ms: per(containerd.min(host) as f64),
        runtime_ms: per(runtime as f64),
        containers_ms: per(pods_cg as f64),
        elsewhere_ms: per(elsewhere),
    })
}

/// The counters of one bench's containerd. Dropped after containerd stops:
/// moves what is left in its cgroup back to the bench's and removes it.
pub struct CpuMeter {
    containerd_pid: u32,
    host: Usage,
    pods: Usage,
    /// The bench's own cgroup in that hierarchy (where leftovers go back).
    home: PathBuf,
    made_pods: bool,
    tick_us: u64,
}

impl CpuMeter {
    /// Moves containerd (`pid`) into a new cgroup; `namespace` is the
    /// containerd namespace whose containers are measured. Errors say why
    /// the split cannot be measured here.
    pub fn start(pid: u32, namespace: &str) -> Result<CpuMeter, String> {
        let mountinfo = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
        let hier = rund_cgroup::Hierarchy::from_mountinfo(&mountinfo)
            .map_err(|e| format!("no cgroup hierarchy: {e}"))?;
        let (root, v2) = match &hier {
            rund_cgroup::Hierarchy::V2 { root } => (root.clone(), true),
            h => (
                h.v1_mount("cpuacct")
                    .ok_or("no cpuacct hierarchy mounted")?
                    .to_path_buf(),
                false,
            ),
        };
        let own = own_cgroup(v2).ok_or("the bench's own cgroup is not known")?;
        let home = root.join(own.trim_start_matches('/'));
        // containerd's pid too: one process may meter two containerds (tests).
        let host_dir = home.join(format!(
            "rund-bench-containerd-{}-{pid}",
            std::process::id()
        ));
        std::fs::create_dir(&host_dir).map_err(|e| format!("mkdir {}: {e}", host_dir.display()))?;
        if let Err(e) = std::fs::write(host_dir.join("cgroup.procs"), pid.to_string()) {
            let _ = std::fs::remove_dir(&host_dir);
            return Err(format!(
                "moving containerd into {}: {e}",
                host_dir.display()
            ));
        }
        let pods_dir = root.join(namespace);
        let made_pods = std::fs::create_dir(&pods_dir).is_ok();
        let wrap = |d: PathBuf| if v2 { Usage::V2(d) } else { Usage::V1(d) };
        // SAFETY: sysconf only reads a constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let meter = CpuMeter {
            containerd_pid: pid,
            host: wrap(host_dir),
            pods: wrap(pods_dir),
            home,
            made_pods,
            tick_us: 1_000_000 / hz,
        };
        meter
            .snap()
            .map(|_| meter)
            .ok_or_else(|| "a CPU counter cannot be read".to_string())
    }

    /// Reads every counter at the start of a span. The bench's own reading
    /// is taken last (and the machine's last but one), so the work of
    /// reading is not charged to the client.
    pub fn snap(&self) -> Option<Snap> {
        self.read(false)
    }

    /// [`snap`](Self::snap) for the end of a span: the bench's and the
    /// machine's readings first.
    pub fn snap_after(&self) -> Option<Snap> {
        self.read(true)
    }

    fn read(&self, end: bool) -> Option<Snap> {
        let client = || rusage_us(libc::RUSAGE_SELF) + rusage_us(libc::RUSAGE_CHILDREN);
        let machine = || parse_machine_ticks(&read(Path::new("/proc/stat"))?);
        let mut s = Snap::default();
        if end {
            s.client = client();
            s.machine_ticks = machine()?;
        }
        s.pods_cg = self.pods.read_us().unwrap_or(0);
        s.host_cg = self.host.read_us()?;
        s.containerd = process_us(self.containerd_pid)?;
        if !end {
            s.machine_ticks = machine()?;
            s.client = client();
        }
        Some(s)
    }

    pub fn split(&self, a: &Snap, b: &Snap, pods: usize) -> Option<CpuSplit> {
        split(a, b, pods, self.tick_us)
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        let dir = self.host.dir();
        // Lingering shims go back to the bench's cgroup so the dir can go.
        let procs = read(&dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.home.join("cgroup.procs"), pid);
        }
        let _ = std::fs::remove_dir(dir);
        if self.made_pods {
            // Only if empty: a container left behind keeps it.
            let _ = std::fs::remove_dir(self.pods.dir());
        }
    }
}

/// This process's cgroup in the cpuacct (v1) or unified (v2) hierarchy.
fn own_cgroup(v2: bool) -> Option<String> {
    let text = read(Path::new("/proc/self/cgroup"))?;
    text.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
        let hit = if v2 {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == "cpuacct")
        };
        hit.then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_parse() {
        assert_eq!(
            parse_usage_usec("usage_usec 1234\nuser_usec 1000\n"),
            Some(1234)
        );
        assert_eq!(parse_usage_usec("user_usec 1000\n"), None);
        let stat = "cpu  10 2 30 400 5 6 7 8 9 0\ncpu0 1 1 1 1 1 1 1 1 1 1\n";
        // user + nice + system + irq + softirq; not idle, iowait or steal.
        assert_eq!(parse_machine_ticks(stat), Some(10 + 2 + 30 + 6 + 7));
        assert_eq!(parse_schedstat_ns("987654 321 12\n"), Some(987654));
    }

    #[test]
    fn a_span_is_split_per_pod_and_the_rest_is_elsewhere() {
        let a = Snap {
            client: 1_000,
            containerd: 5_000,
            host_cg: 8_000,
            pods_cg: 0,
            machine_ticks: 100,
        };
        let b = Snap {
            client: 41_000,     // +40 ms
            containerd: 25_000, // +20 ms
            host_cg: 58_000,    // +50 ms: containerd's 20 and 30 more
            pods_cg: 10_000,    // +10 ms
            machine_ticks: 113, // +130 ms at 10 ms a tick
        };
        let s = split(&a, &b, 10, 10_000).unwrap();
        assert_eq!(s.pods, 10);
        assert!((s.client_ms - 4.0).abs() < 1e-9, "{s:?}");
        assert!((s.containerd_ms - 2.0).abs() < 1e-9, "{s:?}");
        assert!((s.runtime_ms - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.containers_ms - 1.0).abs() < 1e-9, "{s:?}");
        // 130 - (40 + 50 + 10) = 30 ms over 10 pods.
        assert!((s.elsewhere_ms - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.total_ms() - 13.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_counter_that_went_back_gives_no_split() {
        let a = Snap {
            pods_cg: 500,
            ..Snap::default()
        };
        assert_eq!(split(&a, &Snap::default(), 1, 10_000), None);
        assert_eq!(split(&Snap::default(), &Snap::default(), 0, 10_000), None);
    }

    #[test]
    fn splits_add_weighted_by_pods() {
        let mut a = CpuSplit {
            pods: 1,
            client_ms: 10.0,
            ..CpuSplit::default()
        };
        let b = CpuSplit {
            pods: 3,
            client_ms: 2.0,
            ..CpuSplit::default()
        };
        a.add(&b);
        assert_eq!(a.pods, 4);
        assert!((a.client_ms - 4.0).abs() < 1e-9);
    }

    #[test]
    fn containerd_and_what_it_spawns_are_told_apart_and_the_cgroup_goes_after() {
        use std::io::{BufRead, Write};
        if !nix::unistd::Uid::effective().is_root() {
            rund_tests::skip!("needs root to make a cgroup");
        }
        // A stand-in for containerd: on a line of input it runs a busy child
        // (a shim's work) and says so; then it waits.
        let script = "read x; sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'; \
                      echo done; read y";
        let mut child = std::process::Command::new("sh")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ns = format!("rund-bench-test-{}", std::process::id());
        let meter = CpuMeter::start(child.id(), &ns).unwrap();
        let host = meter.host.dir().to_path_buf();
        let a = meter.snap().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "done\n");
        let b = meter.snap_after().unwrap();
        let s = meter.split(&a, &b, 2).unwrap();
        // The busy child is gone: its time is the runtime's, not containerd's.
        assert!(s.runtime_ms > 5.0, "{s:?}");
        assert!(s.containerd_ms < s.runtime_ms, "{s:?}");
        let procs = read(&host.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|p| p == child.id().to_string()),
            "{procs}"
        );
        // Dropped while the stand-in still runs: it goes back, the dir goes.
        drop(meter);
        assert!(!host.exists(), "{} left behind", host.display());
        drop(stdin);
        let _ = child.wait();
    }
}
