//! A private containerd per test: its own root, state, sockets, config and PATH. Which
//! containerd (Debian's 1.6 or a cached 2.1) is [`line::selected`]'s choice.
//!
//! Never touches /run/containerd or the system containerd. Dropping it stops containerd by pid,
//! ends what it left running (only processes that reference this instance's dir), unmounts
//! leftovers, removes the test cgroups and deletes the dir.

mod cleanup;
pub mod config;
mod ctr;
pub mod events;
pub mod line;
pub mod podnet;
mod pty;
mod sandboxes;
mod task;
mod update;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::bins::{self, RundBins};
use crate::cmd;
use crate::error::{Error, IoContext, Result};
use crate::rootfs::HARNESS_BASE;
pub use config::Layout;
pub use ctr::{RunSpec, ROOTFS_PATH_ENV};
pub use events::{Event, EventWatch};
pub use line::ContainerdBins;
pub use podnet::PodNetwork;
pub use pty::PtyCtr;
pub use sandboxes::{Any, Metric, SandboxStatus};
pub use task::TaskInfo;

/// Debian 12's containerd (1.6.20): the default line (see [`line`]).
pub const CONTAINERD_BIN: &str = "/usr/bin/containerd";
/// Debian 12's ctr. Tests use [`Containerd::ctr_path`], which matches the running containerd.
pub const CTR_BIN: &str = "/usr/bin/ctr";
/// The CRI namespace.
pub const K8S_NAMESPACE: &str = "k8s.io";
/// Runtime names.
pub const RUND_RUNTIME: &str = "io.containerd.rund.v2";
pub const RUNC_RUNTIME: &str = "io.containerd.runc.v2";
/// Overrides the runtime the rund suites drive (`io.containerd.runc.v2` validates the tests
/// against runc).
pub const RUNTIME_ENV: &str = "RUND_IT_RUNTIME";

/// The runtime the rund suites run: `$RUND_IT_RUNTIME`, default [`RUND_RUNTIME`].
pub fn runtime_under_test() -> String {
    std::env::var(RUNTIME_ENV).unwrap_or_else(|_| RUND_RUNTIME.to_owned())
}

/// Set to `1` to keep the instance dir (logs, state) after the test for debugging.
pub const KEEP_ENV: &str = "RUND_IT_KEEP";

/// How to start the private containerd.
#[derive(Debug, Clone)]
pub struct ContainerdOpts {
    /// Enable the CRI plugin (runtime handlers `rund`, and `runc` when `with_runc`).
    pub cri: bool,
    /// Put runc and containerd-shim-runc-v2 on PATH (reference runs, benches).
    pub with_runc: bool,
    /// Put rund's binaries on PATH when they are built (default true).
    pub with_rund: bool,
    /// containerd log level debug instead of info.
    pub debug: bool,
    /// CRI sandbox image; default [`crate::image::BUSYBOX_IMAGE`].
    pub sandbox_image: Option<String>,
    /// `ConfigPath` in the CRI `rund` runtime options.
    pub rund_config_path: Option<PathBuf>,
    /// containerd 2.x only: the `rund` runtime's `sandboxer` (default `podsandbox`).
    pub rund_sandboxer: Option<String>,
    /// Register the CRI runtime `rund` (default true; `false` leaves it to `rund install`).
    pub rund_runtime: bool,
    /// Write this config version instead of the line's own (2 on containerd 2.x: the shape of
    /// Debian's config.toml, which 2.x migrates).
    pub config_version: Option<u32>,
    /// Start containerd from this config file as it is (e.g. one `rund install` edited)
    /// instead of rendering one. It must use this instance's [`Layout`].
    pub config_file: Option<PathBuf>,
    /// containerd's binaries; default [`line::selected`].
    pub containerd: Option<ContainerdBins>,
    /// More executables to put on containerd's PATH (linked by file name).
    pub path_links: Vec<PathBuf>,
    /// rund config.toml text to write as `<dir>/rund.toml` and use as `ConfigPath` (when
    /// `rund_config_path` is unset); `state_dir` is `<dir>/rund-state` unless the text sets it.
    pub rund_config: Option<String>,
    /// Run containerd in a network namespace of its own with a CNI bridge network
    /// ([`PodNetwork`]), so pods without host network get an interface off the host.
    pub pod_network: bool,
    /// Appended verbatim to config.toml.
    pub extra_config: String,
    /// containerd 2.x's own CDI spec dirs (CRI resolves `cdi.k8s.io/*` container annotations
    /// itself there; 1.6 does not).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// How long to wait for the socket to answer.
    pub start_timeout: Duration,
    /// Extra environment for containerd, which passes it on to every shim (e.g. a failpoint).
    pub env: Vec<(String, String)>,
    /// Give rund its config through `RUND_CONFIG` in containerd's environment, with no CRI
    /// runtime options: containerd 2.x reads a runtime's options as runc's for a
    /// `hostUsers: false` container (and, before 2.4, for every task of a shim sandbox).
    pub rund_config_env: bool,
}

impl Default for ContainerdOpts {
    fn default() -> Self {
        ContainerdOpts {
            cri: false,
            with_runc: false,
            with_rund: true,
            debug: true,
            sandbox_image: None,
            rund_config_path: None,
            rund_sandboxer: None,
            rund_runtime: true,
            config_version: None,
            config_file: None,
            containerd: None,
            path_links: Vec::new(),
            rund_config: None,
            pod_network: false,
            extra_config: String::new(),
            cdi_spec_dirs: Vec::new(),
            start_timeout: Duration::from_secs(30),
            env: Vec::new(),
            rund_config_env: false,
        }
    }
}

impl ContainerdOpts {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cri(mut self) -> Self {
        self.cri = true;
        self
    }
    pub fn with_runc(mut self) -> Self {
        self.with_runc = true;
        self
    }
    pub fn without_rund(mut self) -> Self {
        self.with_rund = false;
        self
    }
    /// CRI with a pod network ([`ContainerdOpts::pod_network`]).
    /// rund is its own pods' sandboxer (containerd 2.x's sandbox API).
    pub fn shim_sandboxer(&self) -> bool {
        self.rund_sandboxer.as_deref() == Some("shim")
    }

    /// rund's config goes through `RUND_CONFIG`, not the runtime options.
    pub fn rund_config_by_env(&self) -> bool {
        self.rund_config_env || self.shim_sandboxer()
    }

    pub fn pod_network(mut self) -> Self {
        self.cri = true;
        self.pod_network = true;
        self
    }
}

/// A running private containerd.
#[derive(Debug)]
pub struct Containerd {
    /// The instance dir (`/tmp/rund-it/cXXXXXX`); everything lives under it.
    pub dir: PathBuf,
    pub layout: Layout,
    /// A namespace unique to this instance, used by [`Containerd::ctr`] and the run helpers.
    pub namespace: String,
    /// A cgroup parent unique to this instance, for CRI pods (`/rit-XXXXXX-pods`).
    pub cgroup_parent: String,
    /// containerd's PATH: one dir of symlinks.
    pub path_dir: PathBuf,
    /// containerd's stdout+stderr.
    pub log: PathBuf,
    /// rund's binaries, when they were found and linked.
    pub rund: Option<RundBins>,
    /// The containerd this instance runs.
    pub bins: ContainerdBins,
    pub opts: ContainerdOpts,
    /// The network namespace containerd runs in, with `opts.pod_network`.
    pub podnet: Option<PodNetwork>,
    child: Option<Child>,
}

impl Containerd {
    /// Start containerd and wait until `ctr version` answers.
    pub fn start(opts: ContainerdOpts) -> Result<Containerd> {
        let ctrd = match &opts.containerd {
            Some(b) => b.clone(),
            None => line::selected()?,
        };
        Self::start_in(Self::new_dir()?, opts, ctrd)
    }

    /// A fresh instance dir under the harness base, for [`Containerd::start_in`].
    pub fn new_dir() -> Result<PathBuf> {
        std::fs::create_dir_all(HARNESS_BASE).ctx("create harness base", HARNESS_BASE)?;
        let dir = tempfile::Builder::new()
            .prefix("c")
            .rand_bytes(6)
            .tempdir_in(HARNESS_BASE)
            .ctx("create instance dir", HARNESS_BASE)?
            .keep();
        Ok(dir)
    }

    /// Start in `dir` (from [`Containerd::new_dir`]), which the instance then owns and removes.
    pub fn start_in(
        dir: PathBuf,
        opts: ContainerdOpts,
        ctrd: ContainerdBins,
    ) -> Result<Containerd> {
        let suffix = dir
            .file_name()
            .map(|n| n.to_string_lossy().trim_start_matches('c').to_lowercase())
            .unwrap_or_default();
        let rund = if opts.with_rund {
            RundBins::find().ok()
        } else {
            None
        };
        let mut me = Containerd {
            layout: Layout::new(&dir),
            namespace: format!("rit-{suffix}"),
            cgroup_parent: format!("/rit-{suffix}-pods"),
            path_dir: dir.join("bin"),
            log: dir.join("containerd.log"),
            dir,
            rund,
            bins: ctrd,
            opts,
            podnet: None,
            child: None,
        };
        // From here on, Drop cleans up whatever a failure leaves.
        me.spawn()?;
        me.wait_ready()?;
        Ok(me)
    }

    /// For tests that need rund: `None` (after printing why) when rund's binaries are not built,
    /// else a started containerd with them on PATH. Panics if containerd cannot start, and
    /// instead of skipping when `RUND_REQUIRE_BINS=1`.
    pub fn start_rund_or_skip(test: &str, opts: ContainerdOpts) -> Option<Containerd> {
        bins::rund_bins_or_skip(test)?;
        let opts = ContainerdOpts {
            with_rund: true,
            ..opts
        };
        Some(Containerd::start(opts).unwrap_or_else(|e| panic!("{test}: {e}")))
    }

    /// Start for the runtime under test ([`runtime_under_test`]): rund (skipping if not built,
    /// see [`Containerd::start_rund_or_skip`]) or, for validating the tests themselves, runc.
    pub fn start_under_test(test: &str, opts: ContainerdOpts) -> Option<Containerd> {
        if runtime_under_test() == RUNC_RUNTIME {
            let opts = ContainerdOpts {
                with_runc: true,
                ..opts
            };
            return Some(Containerd::start(opts).unwrap_or_else(|e| panic!("{test}: {e}")));
        }
        Containerd::start_rund_or_skip(test, opts)
    }

    fn spawn(&mut self) -> Result<()> {
        bins::populate_path_dir(
            &self.path_dir,
            self.rund.as_ref(),
            self.opts.with_runc,
            &self.bins.dir,
        )?;
        for target in &self.opts.path_links {
            let link = self.path_dir.join(target.file_name().unwrap_or_default());
            std::os::unix::fs::symlink(target, &link).ctx("symlink into PATH dir", link)?;
        }
        if let (Some(body), None) = (&self.opts.rund_config, &self.opts.rund_config_path) {
            let path = self.dir.join("rund.toml");
            let mut text = body.clone();
            if !body
                .lines()
                .any(|l| l.trim_start().starts_with("state_dir"))
            {
                let state = self.dir.join("rund-state").display().to_string();
                text = format!("state_dir = {state:?}\n{body}");
            }
            std::fs::write(&path, text).ctx("write rund config", &path)?;
            self.opts.rund_config_path = Some(path);
        }
        self.layout
            .create()
            .ctx("create containerd dirs", &self.dir)?;
        if self.opts.config_file.is_none() {
            let p = self.dir.join("config.toml");
            let cfg = config::render(&self.layout, &self.opts, &self.bins);
            std::fs::write(&p, cfg).ctx("write config.toml", &p)?;
        }
        if self.opts.pod_network && self.podnet.is_none() {
            let suffix = self.namespace.trim_start_matches("rit-");
            let net = PodNetwork::create(&self.dir, &self.layout.cni_conf, suffix)?;
            self.podnet = Some(net);
        }
        self.launch()
    }

    /// Runs containerd on the instance's config; its log is appended to.
    fn launch(&mut self) -> Result<()> {
        let cfg_path = self
            .opts
            .config_file
            .clone()
            .unwrap_or_else(|| self.dir.join("config.toml"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .ctx("open log", &self.log)?;
        let log2 = log.try_clone().ctx("dup log", &self.log)?;
        let containerd = self.bins.containerd();
        let mut cmd = Command::new(&containerd);
        cmd.arg("--config")
            .arg(&cfg_path)
            .env_clear()
            .env("PATH", &self.path_dir)
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .current_dir(&self.dir);
        for (k, v) in std::env::vars_os() {
            let key = k.to_string_lossy();
            if key.starts_with("RUND_") || key.starts_with("RUST_") {
                cmd.env(&k, &v);
            }
        }
        if let Some(cfg) = self.opts.rund_config_path.as_ref() {
            if self.opts.rund_config_by_env() {
                cmd.env("RUND_CONFIG", cfg);
            }
        }
        if let Some(net) = &self.podnet {
            net.enter_on_exec(&mut cmd);
        }
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        self.child = Some(cmd.spawn().ctx("spawn containerd", containerd)?);
        Ok(())
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.opts.start_timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(self.not_ready(format!("containerd exited: {st}")));
                }
            }
            let mut c = Command::new(self.ctr_path());
            c.arg("--address").arg(&self.layout.grpc).arg("version");
            if let Ok(out) = cmd::run(c, None, Duration::from_secs(5)) {
                if out.success() && out.stdout.contains("Server:") {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(self.not_ready(String::new()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn not_ready(&self, why: String) -> Error {
        Error::NotReady {
            socket: self.layout.grpc.display().to_string(),
            secs: self.opts.start_timeout.as_secs(),
            log: format!("{why}\n{}", self.log_tail(40)),
        }
    }

    /// The ctr that belongs to the running containerd.
    pub fn ctr_path(&self) -> PathBuf {
        self.bins.ctr()
    }

    /// containerd 2.x (config version 3, task API v3 available).
    pub fn is_v2(&self) -> bool {
        self.bins.is_v2()
    }

    /// The bundle containerd made for task `id` in namespace `ns` (the same path on 1.6 and
    /// 2.x).
    pub fn task_bundle(&self, ns: &str, id: &str) -> PathBuf {
        self.layout
            .state
            .join("io.containerd.runtime.v2.task")
            .join(ns)
            .join(id)
    }

    /// containerd's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The gRPC socket path.
    pub fn address(&self) -> &Path {
        &self.layout.grpc
    }

    /// Whether rund's binaries are on this containerd's PATH.
    pub fn has_rund(&self) -> bool {
        self.rund.is_some()
    }

    /// Host paths whose mention attributes a mount or process to this instance.
    pub fn watch_prefixes(&self) -> Vec<PathBuf> {
        vec![self.dir.clone()]
    }

    /// Cgroup roots of this instance: `/<namespace>` (ctr) and the CRI cgroup parent.
    pub fn cgroup_roots(&self) -> Vec<String> {
        vec![format!("/{}", self.namespace), self.cgroup_parent.clone()]
    }

    /// A busybox rootfs private to this instance (`<dir>/rootfs`), built on first call.
    /// Being under the instance dir, leak checks and clean-up cover it.
    pub fn busybox_rootfs(&self) -> Result<PathBuf> {
        let p = self.dir.join("rootfs");
        if !p.join("bin/busybox").exists() {
            crate::rootfs::busybox_rootfs(&p)?;
        }
        Ok(p)
    }

    /// Last `n` lines of containerd's log (shim logs land here too).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Stops containerd (SIGTERM, as a service restart does) and starts it again on the same
    /// root, state, sockets and config; shims keep running meanwhile.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.launch()?;
        self.wait_ready()
    }

    /// Starts containerd again after [`Containerd::stop`] (no-op if it runs).
    pub fn start_again(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        self.launch()?;
        self.wait_ready()
    }

    /// Stop containerd: SIGTERM, up to 10 s, then SIGKILL. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = Pid::from_raw(child.id() as i32);
        if matches!(child.try_wait(), Ok(None)) {
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
        }
        let _ = child.wait();
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- containerd log tail ({}) ----\n{}\n----",
                self.log.display(),
                self.log_tail(80)
            );
        }
        self.stop();
        cleanup::after_stop(self);
        if let Some(net) = &self.podnet {
            net.remove_leftover_pod_netns();
        }
    }
}
