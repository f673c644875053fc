//! Shared set-up of the user-namespace integration tests (tests/rund_userns.rs):
//! a private containerd with rund and a rund config of its own, lease-file
//! reading, host id lookups.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ocispec::ConfigRun;
use crate::{
    assert_no_leaks_within, runtime_under_test, CmdOutput, Containerd, ContainerdOpts,
    LeakSnapshot, RunSpec, RUND_RUNTIME,
};
use serde_json::Value;

/// The pool every test configures (rund's defaults).
pub const BASE: u64 = 1_000_000;
pub const SIZE: u64 = 65_536;
pub const COUNT: u64 = 1024;
/// Shims exit asynchronously after delete; the machine is small and busy.
pub const GRACE: Duration = Duration::from_secs(60);
pub const CTR_TIMEOUT: Duration = Duration::from_secs(240);

/// A private containerd with rund, a busybox rootfs and a rund config of its own.
pub struct Env {
    pub ctd: Containerd,
    pub rootfs: PathBuf,
    pub config: PathBuf,
    pub state: PathBuf,
}

/// Runs `body` against a fresh [`Env`] whose pool has `count` ranges and whose rund config
/// remaps every pod (`mode = "always"`), then asserts that no lease is left and nothing leaked
/// since just before `body`.
pub fn userns_test(test: &str, count: u64, body: impl FnOnce(&Env, &LeakSnapshot)) {
    userns_test_with(test, count, "always", "", body)
}

/// [`userns_test`] with `[userns] mode = <mode>` and `extra` appended to the `[userns]` table
/// of the rund config (TOML: further `[userns]` keys, then other tables).
pub fn userns_test_with(
    test: &str,
    count: u64,
    mode: &str,
    extra: &str,
    body: impl FnOnce(&Env, &LeakSnapshot),
) {
    if runtime_under_test() != RUND_RUNTIME {
        crate::skip!(
            "per-sandbox user namespaces are rund's, not {}",
            runtime_under_test()
        );
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        crate::skip!("user namespaces are disabled (user.max_user_namespaces = 0)");
    }
    let Some(ctd) = Containerd::start_rund_or_skip(test, ContainerdOpts::new()) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let (state, config) = (ctd.dir.join("rund-state"), ctd.dir.join("rund.toml"));
    let toml = format!(
        "state_dir = {:?}\n[userns]\nmode = {mode:?}\nbase = {BASE}\nsize = {SIZE}\ncount = {count}\n{extra}",
        state.display().to_string()
    );
    std::fs::write(&config, toml).unwrap();
    let env = Env {
        ctd,
        rootfs,
        config,
        state,
    };
    let before = LeakSnapshot::take(&env.ctd);
    body(&env, &before);
    env.assert_no_leases();
    assert_no_leaks_within(&env.ctd, &before, GRACE);
}

pub fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: String,
    pub base: u64,
    pub size: u64,
}

impl Env {
    /// `ctr run` of `args` on the dir rootfs with this test's rund config and `flags`.
    pub fn spec(&self, id: &str, args: &[&str], flags: &[&str]) -> RunSpec {
        let mut f = strs(&["--runtime-config-path", &self.config.display().to_string()]);
        f.extend(strs(flags));
        RunSpec {
            id: id.into(),
            rootfs: Some(self.rootfs.clone()),
            args: strs(args),
            flags: f,
            timeout: CTR_TIMEOUT,
            ..RunSpec::new(RUND_RUNTIME)
        }
    }

    /// A foreground `ctr run --rm`; the output whatever the exit status.
    pub fn run(&self, id: &str, args: &[&str], flags: &[&str]) -> CmdOutput {
        self.ctd.run_spec(&self.spec(id, args, flags)).unwrap()
    }

    /// `ctr run -d` of a sleeper; returns the task's host pid.
    pub fn sleeper(&self, id: &str, flags: &[&str]) -> u32 {
        let spec = RunSpec {
            detach: true,
            ..self.spec(id, &["sleep", "100000"], flags)
        };
        let out = self.ctd.run_spec(&spec).unwrap();
        assert!(out.success(), "{id}: {out:?}");
        self.task_pid(id)
    }

    pub fn task_pid(&self, id: &str) -> u32 {
        let tasks = self.ctd.task_list().unwrap();
        let t = tasks.iter().find(|t| t.id == id);
        let t = t.unwrap_or_else(|| panic!("no task {id} in {tasks:?}"));
        assert!(t.pid > 0, "{t:?}");
        t.pid
    }

    /// Kill, delete the task and the container, and wait until the task is gone.
    pub fn remove(&self, id: &str) {
        self.ctd.remove_container(id);
        self.ctd.wait_for_status(id, "absent", GRACE).unwrap();
    }

    /// `ctr run --rm --config` of a full OCI spec with this test's rund config.
    pub fn run_config(&self, id: &str, spec: &Value) -> CmdOutput {
        self.config_run(id, spec, false)
    }

    /// [`Env::run_config`], detached; fails unless the task started.
    pub fn run_config_detached(&self, id: &str, spec: &Value) {
        let out = self.config_run(id, spec, true);
        assert!(out.success(), "{id}: {out:?}");
    }

    fn config_run(&self, id: &str, spec: &Value, detach: bool) -> CmdOutput {
        let opts = ConfigRun {
            detach,
            runtime_config: Some(self.config.clone()),
            ..ConfigRun::default()
        };
        self.ctd.run_config(id, spec, &opts).unwrap()
    }

    /// The leases in `<state_dir>/userns/leases.json` (none when the file does not exist).
    pub fn leases(&self) -> Vec<Lease> {
        let file = self.state.join("userns/leases.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(v["version"], 1, "{text}");
        let list = v["leases"]
            .as_array()
            .unwrap_or_else(|| panic!("no leases: {text}"));
        list.iter()
            .map(|l| Lease {
                id: l["sandbox_id"].as_str().unwrap().to_owned(),
                base: l["host_base"].as_u64().unwrap(),
                size: l["size"].as_u64().unwrap(),
            })
            .collect()
    }

    pub fn lease(&self, id: &str) -> Lease {
        let all = self.leases();
        let l = all.iter().find(|l| l.id == id).cloned();
        l.unwrap_or_else(|| panic!("no lease for {id}: {all:?}"))
    }

    /// Waits (deletion is asynchronous) until no lease is left.
    pub fn assert_no_leases(&self) {
        let deadline = Instant::now() + GRACE;
        while !self.leases().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(
            self.leases(),
            vec![],
            "leases left in {}",
            self.state.display()
        );
    }
}

/// The identity map of the host user namespace, as `/proc/self/uid_map` shows it.
pub const HOST_MAP: (u64, u64, u64) = (0, 0, 4_294_967_295);

/// A leased range is one of the pool's slots.
pub fn assert_pool_slot(base: u64) {
    assert!(
        base >= BASE && (base - BASE).is_multiple_of(SIZE) && (base - BASE) / SIZE < COUNT,
        "host base {base} is not base {BASE} + k*{SIZE}, k < {COUNT}"
    );
}

/// (real uid, real gid) of a host pid; effective, saved and fs ids must agree.
pub fn host_ids(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ids = |key: &str| -> u64 {
        let line = status.lines().find_map(|l| l.strip_prefix(key)).unwrap();
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(f.iter().all(|x| *x == f[0]), "pid {pid} {key} {f:?}");
        f[0]
    };
    (ids("Uid:"), ids("Gid:"))
}

/// Rows of a uid_map/gid_map.
pub fn parse_map(text: &str) -> Vec<(u64, u64, u64)> {
    let row = |l: &str| {
        let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(f.len(), 3, "bad map row {l:?}");
        (f[0], f[1], f[2])
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(row)
        .collect()
}

pub fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.uid(), m.gid())
}

/// The output's lines; fails unless there are exactly `n`.
pub fn lines(out: &CmdOutput, n: usize) -> Vec<&str> {
    let l: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(l.len(), n, "{out:?}");
    l
}

/// Bad input: `ctr run` failed with an error naming every needle, the leases are exactly
/// `leases`, and nothing (mount, cgroup, process, socket, bundle) outlives `before`.
pub fn assert_bad_input(
    env: &Env,
    before: &LeakSnapshot,
    out: &CmdOutput,
    needles: &[&str],
    leases: &[Lease],
) {
    assert!(!out.success(), "must fail: {out:?}");
    eprintln!("ctr's error: {}", out.stderr.trim());
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "ctr's error must name {n:?}: {}",
            out.stderr
        );
    }
    assert_eq!(
        env.leases(),
        leases,
        "a failed start must hold no new lease"
    );
    assert_no_leaks_within(&env.ctd, before, GRACE);
}
