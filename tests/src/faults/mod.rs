//! Shared set-up of the fault suite (`tests/faults_*.rs`) and the soak: a private containerd
//! with rund, a rund config of its own (named by every ctr container and, with CRI, by the
//! `rund` runtime's options) whose state (user namespace leases, the cgroup pool's lock,
//! counter and mapping files) lies in a scratch dir of the test, and leftover accounting
//! ([`Leftovers`]) over all of it.

pub mod leftovers;
pub mod probe;
pub mod soak;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub use leftovers::{assert_clean_within, wait_clean, Leftovers};

use crate::bins::{rund_bins_or_skip, CLI_BIN};
use crate::cmd::CmdOutput;
use crate::containerd::{runtime_under_test, Containerd, ContainerdOpts, RunSpec, RUND_RUNTIME};
use crate::rootfs::HARNESS_BASE;

/// Generous bound for anything asynchronous (shim exits, clean-up): a hang guard only.
pub const GRACE: Duration = Duration::from_secs(60);

/// A private containerd with rund and a rund config of its own.
pub struct FaultEnv {
    pub ctd: Containerd,
    pub rootfs: PathBuf,
    /// The rund config every container of the test names (`--runtime-config-path`).
    pub config: PathBuf,
    /// Its `state_dir`; the cgroup pool's state is `<state>/cgroup-pool`.
    pub state: PathBuf,
    /// The `rund` admin CLI.
    pub cli: PathBuf,
    _scratch: tempfile::TempDir,
}

impl FaultEnv {
    /// Starts containerd with `opts` and writes the rund config: the state dirs, `cgroup_keys`
    /// (TOML keys of the `[cgroup]` table) and `extra` (further tables). `None` (after saying
    /// why) when rund is not the runtime under test or not built.
    pub fn start(
        test: &str,
        opts: ContainerdOpts,
        cgroup_keys: &str,
        extra: &str,
    ) -> Option<FaultEnv> {
        if runtime_under_test() != RUND_RUNTIME {
            eprintln!(
                "SKIP {test}: rund's fault behaviour, not {}'s",
                runtime_under_test()
            );
            return None;
        }
        let bins = rund_bins_or_skip(test)?;
        std::fs::create_dir_all(HARNESS_BASE).expect("harness base");
        let scratch = tempfile::Builder::new()
            .prefix("f")
            .tempdir_in(HARNESS_BASE)
            .expect("scratch dir");
        let state = scratch.path().join("rund-state");
        let config = scratch.path().join("rund.toml");
        let opts = ContainerdOpts {
            rund_config_path: Some(config.clone()),
            ..opts
        };
        let ctd = Containerd::start_rund_or_skip(test, opts)?;
        // The pool serves long-lived parents only: ctr's is `/<namespace>`, known once
        // containerd runs (the shim reads this file at its first Create).
        let toml = format!(
            "state_dir = {s:?}\n\n[cgroup]\nstate_dir = {p:?}\npool_parents = [{parent:?}]\n\
             {cgroup_keys}\n\n{extra}\n",
            s = state.display().to_string(),
            p = state.join("cgroup-pool").display().to_string(),
            parent = format!("/{}", ctd.namespace),
        );
        std::fs::write(&config, toml).expect("write rund config");
        let rootfs = ctd.busybox_rootfs().expect("busybox rootfs");
        Some(FaultEnv {
            ctd,
            rootfs,
            config,
            state,
            cli: bins.path(CLI_BIN),
            _scratch: scratch,
        })
    }

    /// `ctr run --rm` of `args` on the busybox rootfs with this test's rund config.
    pub fn spec(&self, id: &str, args: &[&str]) -> RunSpec {
        RunSpec {
            id: id.into(),
            rootfs: Some(self.rootfs.clone()),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            flags: vec![
                "--runtime-config-path".into(),
                self.config.display().to_string(),
            ],
            timeout: Duration::from_secs(240),
            ..RunSpec::new(RUND_RUNTIME)
        }
    }

    /// `ctr run -d` of `args`; panics unless the task started. Returns its host pid.
    pub fn run_detached(&self, id: &str, args: &[&str]) -> u32 {
        let spec = RunSpec {
            detach: true,
            ..self.spec(id, args)
        };
        let out = self.ctd.run_spec(&spec).expect("ctr run");
        assert!(out.success(), "{id}: {out:?}");
        self.task_pid(id)
    }

    /// The host pid `ctr task ls` shows for `id`.
    pub fn task_pid(&self, id: &str) -> u32 {
        let tasks = self.ctd.task_list().expect("ctr task ls");
        tasks
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("no task {id} in {tasks:?}"))
            .pid
    }

    /// Kill, delete the task and the container; wait until the task is gone.
    pub fn remove(&self, id: &str) {
        self.ctd.remove_container(id);
        self.ctd
            .wait_for_status(id, "absent", GRACE)
            .expect("task removed");
    }

    /// Everything attributable to the instance now; `shims` are watched for fd growth.
    pub fn leftovers(&self, shims: &[u32]) -> Leftovers {
        Leftovers::take(&self.ctd, &self.state, shims)
    }

    /// Waits (bounded) until nothing is left beyond `before`; panics with what is left.
    pub fn assert_clean(&self, before: &Leftovers) -> Leftovers {
        assert_clean_within(&self.ctd, before, &self.state, GRACE)
    }

    /// `rund pool status --json` with this test's config: every pool (one per parent).
    pub fn pools(&self) -> Vec<serde_json::Value> {
        let out = Command::new(&self.cli)
            .arg("--config")
            .arg(&self.config)
            .args(["pool", "status", "--json"])
            .output()
            .expect("run rund pool status");
        assert!(
            out.status.success(),
            "rund pool status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["pools"].as_array().cloned().unwrap_or_default()
    }

    /// The first pool of [`FaultEnv::pools`], or `Null`.
    pub fn pool_status(&self) -> serde_json::Value {
        self.pools().into_iter().next().unwrap_or_default()
    }

    /// `ctr task exec` of `args` in `id`; the output whatever the status.
    pub fn exec(&self, id: &str, exec_id: &str, args: &[&str]) -> CmdOutput {
        self.ctd
            .task_exec(id, exec_id, args, None)
            .expect("ctr task exec")
    }
}
