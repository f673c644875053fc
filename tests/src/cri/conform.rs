//! One CRI test body, run against both runtime handlers on a private containerd: `runc` is the
//! reference and `rund` must behave the same, except where rund documents a difference.
//!
//! [`per_handler!`](crate::per_handler) turns `fn name(h: Handler)` into the tests
//! `name::runc` and `name::rund`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{ContainerSpec, CriClient, PodSpec};
use crate::containerd::{Containerd, ContainerdOpts};
use crate::leaks::{assert_no_leaks_within, LeakSnapshot};

/// How long a pod's resources may take to go after RemovePodSandbox (shims exit asynchronously).
const SETTLE: Duration = Duration::from_secs(15);
/// ExecSync timeout, in seconds: generous, only a hung exec trips it.
const EXEC_TIMEOUT: i64 = 60;
/// Waits for something a container does in the background (a server listening, a log line).
const WAIT: Duration = Duration::from_secs(60);

/// A CRI runtime handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// Debian's runc through containerd-shim-runc-v2: the reference.
    Runc,
    /// rund with its default config (only its state dir is private to the instance).
    Rund,
}

impl Handler {
    /// The runtime handler name sent in RunPodSandbox.
    pub fn name(self) -> &'static str {
        match self {
            Handler::Runc => "runc",
            Handler::Rund => "rund",
        }
    }
}

/// Defines `mod name { #[test] fn runc(); #[test] fn rund(); }` for each `fn name(Handler)`.
#[macro_export]
macro_rules! per_handler {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn runc() {
                    super::$name($crate::cri::Handler::Runc)
                }
                #[test]
                fn rund() {
                    super::$name($crate::cri::Handler::Rund)
                }
            }
        )+
    };
}

/// What an ExecSync returned, as text.
#[derive(Debug, Clone)]
pub struct Exec {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A CRI containerd for one handler, the pods a test made there, and a leak snapshot.
pub struct CriFixture {
    pub handler: Handler,
    pub cri: CriClient,
    pub ctd: Containerd,
    before: LeakSnapshot,
    pods: Vec<String>,
    finished: bool,
}

impl std::fmt::Debug for CriFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CriFixture({}, {})",
            self.handler.name(),
            self.ctd.dir.display()
        )
    }
}

impl CriFixture {
    /// Start containerd with CRI (`opts` plus what `handler` needs). `None` after printing SKIP
    /// when rund is not built (a failure with `RUND_REQUIRE_BINS=1`).
    pub fn start(handler: Handler, test: &str, opts: ContainerdOpts) -> Option<CriFixture> {
        let opts = ContainerdOpts { cri: true, ..opts };
        let ctd = match handler {
            Handler::Runc => {
                Containerd::start(opts.with_runc()).unwrap_or_else(|e| panic!("{test} (runc): {e}"))
            }
            Handler::Rund => {
                let opts = ContainerdOpts {
                    rund_config: opts.rund_config.clone().or(Some(String::new())),
                    ..opts
                };
                Containerd::start_rund_or_skip(test, opts)?
            }
        };
        let cri = ctd
            .cri_client()
            .unwrap_or_else(|e| panic!("{test}: CRI client: {e}"));
        let before = LeakSnapshot::take(&ctd);
        Some(CriFixture {
            handler,
            cri,
            ctd,
            before,
            pods: Vec::new(),
            finished: false,
        })
    }

    /// A pod spec named `name` under this instance's cgroup parent (host network).
    pub fn pod_spec(&self, name: &str) -> PodSpec {
        PodSpec::new(name, &self.ctd.cgroup_parent)
    }

    /// A directory for the test's own files, removed with the instance.
    pub fn scratch(&self, name: &str) -> PathBuf {
        let p = self.ctd.dir.join("scratch").join(name);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        p
    }

    /// RunPodSandbox, remembered for clean-up.
    pub fn run_pod(&mut self, pod: &PodSpec) -> crate::cri::CriResult<String> {
        let id = self.cri.run_pod_sandbox(pod, self.handler.name())?;
        self.pods.push(id.clone());
        Ok(id)
    }

    /// CreateContainer + StartContainer.
    pub fn run(
        &self,
        pod_id: &str,
        c: &ContainerSpec,
        pod: &PodSpec,
    ) -> crate::cri::CriResult<String> {
        self.cri.create_and_start(pod_id, c, pod)
    }

    /// ExecSync `cmd`; a CRI error fails the test, naming the handler.
    pub fn exec(&self, id: &str, cmd: &[&str]) -> Exec {
        let r = self
            .cri
            .exec_sync(id, cmd, EXEC_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: ExecSync {cmd:?}: {e}", self.handler.name()));
        Exec {
            code: r.exit_code,
            stdout: String::from_utf8_lossy(&r.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&r.stderr).into_owned(),
        }
    }

    /// ExecSync `sh -c script`.
    pub fn sh(&self, id: &str, script: &str) -> Exec {
        self.exec(id, &["sh", "-c", script])
    }

    /// ExecSync `sh -c script`, which must exit 0; returns its stdout.
    pub fn sh_ok(&self, id: &str, script: &str) -> String {
        let r = self.sh(id, script);
        assert_eq!(r.code, 0, "{}: `{script}`: {r:?}", self.handler.name());
        r.stdout
    }

    /// `sh -c script` in the container until it exits 0 (a server coming up), at most [`WAIT`].
    pub fn wait_until(&self, id: &str, script: &str) -> Exec {
        let deadline = Instant::now() + WAIT;
        loop {
            let r = self.sh(id, script);
            if r.code == 0 || Instant::now() >= deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod's IP (PodSandboxStatus), empty for a host-network pod.
    pub fn pod_ip(&self, pod_id: &str) -> String {
        self.cri
            .pod_sandbox_status(pod_id)
            .unwrap_or_else(|e| panic!("PodSandboxStatus: {e}"))
            .network
            .map(|n| n.ip)
            .unwrap_or_default()
    }

    /// The file at `path` once it contains `needle`, at most [`WAIT`].
    pub fn wait_file(&self, path: &std::path::Path, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Remove every pod the test made and check nothing is left: no sandbox, no mount, cgroup,
    /// process, socket or bundle of the instance, no pod network namespace of its network.
    pub fn finish(mut self) {
        self.finished = true;
        for id in std::mem::take(&mut self.pods) {
            for c in self.cri.list_containers(Some(&id)).unwrap_or_default() {
                self.cri.stop_container(&c, 0).expect("StopContainer");
                self.cri.remove_container(&c).expect("RemoveContainer");
            }
            self.cri.stop_pod_sandbox(&id).expect("StopPodSandbox");
            self.cri.remove_pod_sandbox(&id).expect("RemovePodSandbox");
        }
        let left = self.cri.list_pod_sandboxes().unwrap();
        assert!(left.is_empty(), "pods left: {left:?}");
        assert_no_leaks_within(&self.ctd, &self.before, SETTLE);
        if let Some(net) = &self.ctd.podnet {
            let left = net.pod_netns();
            assert!(left.is_empty(), "pod network namespaces left: {left:?}");
        }
    }
}

impl Drop for CriFixture {
    fn drop(&mut self) {
        if !self.finished {
            for id in std::mem::take(&mut self.pods) {
                self.cri.remove_pod(&id);
            }
        }
    }
}

/// A host directory bind-mounted on itself and made rshared, as a volume source for mount
/// propagation (the host's `/` may be private). Drop unmounts it and everything below.
#[derive(Debug)]
pub struct SharedDir {
    pub path: PathBuf,
}

impl SharedDir {
    /// Make `path` (created if missing) a shared mount point.
    pub fn new(path: PathBuf) -> crate::Result<SharedDir> {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(&path).map_err(|source| crate::Error::Io {
            what: "create shared dir",
            path: path.clone(),
            source,
        })?;
        let none: Option<&str> = None;
        let io = |what: &'static str, path: &PathBuf| {
            let path = path.clone();
            move |e: nix::Error| crate::Error::Io {
                what,
                path,
                source: e.into(),
            }
        };
        mount(Some(&path), &path, none, MsFlags::MS_BIND, none)
            .map_err(io("bind shared dir", &path))?;
        let me = SharedDir { path };
        mount(
            none,
            &me.path,
            none,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            none,
        )
        .map_err(io("make shared dir rshared", &me.path))?;
        Ok(me)
    }

    /// Mount a tmpfs at `sub` (created if missing) below the shared dir, from the host.
    pub fn mount_tmpfs(&self, sub: &str) -> crate::Result<PathBuf> {
        let p = self.path.join(sub);
        std::fs::create_dir_all(&p).map_err(|source| crate::Error::Io {
            what: "create tmpfs mount point",
            path: p.clone(),
            source,
        })?;
        nix::mount::mount(
            Some("tmpfs"),
            &p,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=1m"),
        )
        .map_err(|e| crate::Error::Io {
            what: "mount tmpfs",
            path: p.clone(),
            source: e.into(),
        })?;
        Ok(p)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        // A lazy unmount detaches the submounts too.
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
    }
}
