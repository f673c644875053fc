//! Full OCI specs for `ctr run --config` (explicit rlimits, annotations), process-tree lookups
//! (a task's shim), and `ctr events` capture.
//!
//! `ctr run --config FILE` takes the spec verbatim: no `--annotation`, `--env` or `--rootfs`
//! handling, so everything goes into the JSON.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cmd::{CmdOutput, DEFAULT_TIMEOUT};
use crate::containerd::{Containerd, ROOTFS_PATH_ENV};
use crate::error::{Error, IoContext, Result};

/// Options of one `ctr run --config`.
#[derive(Debug, Clone, Default)]
pub struct ConfigRun {
    /// `-d --null-io` instead of a foreground `--rm` run.
    pub detach: bool,
    /// `--runtime-config-path`: a rund config file for this container's shim.
    pub runtime_config: Option<PathBuf>,
    /// Extra flags before the id.
    pub flags: Vec<String>,
    /// The runtime, when not the one under test (side-by-side runs with runc).
    pub runtime: Option<String>,
}

impl Containerd {
    /// `ctr oci spec`, made runnable: `root.path` = `rootfs`, `process.args` = `args`, a PATH
    /// env, no terminal, and `linux.cgroupsPath` = `/<namespace>/<id>` (as `ctr run` would
    /// set it, so leak checks see the cgroup).
    pub fn oci_spec(&self, id: &str, rootfs: &Path, args: &[&str]) -> Result<Value> {
        let out = self.ctr(&["oci", "spec"])?.check()?;
        let mut spec: Value = serde_json::from_str(&out.stdout)?;
        spec["root"] = json!({ "path": rootfs.display().to_string(), "readonly": false });
        spec["process"]["args"] = json!(args);
        spec["process"]["env"] = json!([ROOTFS_PATH_ENV]);
        spec["process"]["terminal"] = json!(false);
        spec["linux"]["cgroupsPath"] = json!(format!("/{}/{id}", self.namespace));
        Ok(spec)
    }

    /// Writes `spec` to `<dir>/specs/<id>.json` and runs `ctr run --config <file> ... <id>`.
    /// The output is returned whatever the exit status.
    pub fn run_config(&self, id: &str, spec: &Value, opts: &ConfigRun) -> Result<CmdOutput> {
        let dir = self.dir.join("specs");
        std::fs::create_dir_all(&dir).ctx("create specs dir", &dir)?;
        let file = dir.join(format!("{id}.json"));
        std::fs::write(&file, serde_json::to_vec_pretty(spec)?).ctx("write spec", &file)?;
        let runtime = opts.runtime.clone().unwrap_or_else(|| self.runtime());
        let mut a: Vec<String> = vec!["run".into(), "--runtime".into(), runtime];
        if opts.detach {
            a.extend(["-d".into(), "--null-io".into()]);
        } else {
            a.push("--rm".into());
        }
        if let Some(c) = &opts.runtime_config {
            a.push("--runtime-config-path".into());
            a.push(c.display().to_string());
        }
        a.push("--config".into());
        a.push(file.display().to_string());
        a.extend(opts.flags.iter().cloned());
        a.push(id.into());
        if self.is_v2() && opts.runtime_config.is_some() && has_user_mappings(spec) {
            // ctr 2.x cannot run this: for a spec with uid mappings it reads the runtime
            // options as runc's (`WithUIDOwner`) and fails on any other runtime's options
            // ("can't unmarshal type runtimeoptions.v1.Options"; a client bug, still on
            // containerd's main). Debian's 1.6 ctr speaks the same API without it.
            let mut c = std::process::Command::new(crate::containerd::CTR_BIN);
            c.arg("--address")
                .arg(self.address())
                .arg("--namespace")
                .arg(&self.namespace)
                .args(&a);
            return crate::cmd::run(c, None, DEFAULT_TIMEOUT);
        }
        self.ctr_full(&self.namespace, &a, None, DEFAULT_TIMEOUT)
    }

    fn runtime(&self) -> String {
        crate::containerd::runtime_under_test()
    }

    /// Starts `ctr events` for this instance; its output is collected by [`EventLog`].
    pub fn events(&self) -> Result<EventLog> {
        let file = self.dir.join(format!("events-{}.log", unique()));
        let out = std::fs::File::create(&file).ctx("create events log", &file)?;
        let mut c = self.ctr_command(&self.namespace);
        c.arg("events")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null());
        let child = c.spawn().ctx("spawn ctr events", "ctr")?;
        Ok(EventLog { child, file })
    }
}

fn has_user_mappings(spec: &Value) -> bool {
    spec["linux"]["uidMappings"]
        .as_array()
        .is_some_and(|m| !m.is_empty())
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Adds (or replaces) one `process.rlimits` entry.
pub fn set_rlimit(spec: &mut Value, typ: &str, soft: u64, hard: u64) {
    let rl = &mut spec["process"]["rlimits"];
    if !rl.is_array() {
        *rl = json!([]);
    }
    let arr = rl.as_array_mut().expect("just made an array");
    arr.retain(|r| r["type"] != typ);
    arr.push(json!({ "type": typ, "soft": soft, "hard": hard }));
}

/// Sets one annotation.
pub fn set_annotation(spec: &mut Value, key: &str, value: &str) {
    let a = &mut spec["annotations"];
    if !a.is_object() {
        *a = json!({});
    }
    a[key] = json!(value);
}

/// A running `ctr events`; killed (it is our child) on drop.
#[derive(Debug)]
pub struct EventLog {
    child: Child,
    file: PathBuf,
}

impl EventLog {
    /// Lines seen so far.
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The JSON bodies of `/tasks/exit` events for container `id` seen so far.
    pub fn task_exits(&self, id: &str) -> Vec<Value> {
        self.lines()
            .iter()
            .filter(|l| l.contains("/tasks/exit"))
            .filter_map(|l| l.find('{').and_then(|i| serde_json::from_str(&l[i..]).ok()))
            .filter(|v: &Value| v["container_id"] == id)
            .collect()
    }

    /// Polls until a `/tasks/exit` for `id` (the container's init: `id == container_id`)
    /// arrives; returns its `exit_status` (absent in the JSON means 0).
    pub fn wait_task_exit(&self, id: &str, timeout: Duration) -> Result<u32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.task_exits(id).into_iter().find(|e| e["id"] == id) {
                return Ok(e["exit_status"].as_u64().unwrap_or(0) as u32);
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout {
                    what: format!("/tasks/exit of {id}"),
                    secs: timeout.as_secs(),
                    last: self.lines().join("\n"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The parent pid of `pid`, from /proc/<pid>/stat.
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may hold spaces and parens: the fields after the last ')' are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The nearest ancestor of `pid` (itself excluded) whose executable's file name is `exe`.
pub fn ancestor_with_exe(pid: u32, exe: &str) -> Option<u32> {
    let mut p = parent_pid(pid)?;
    while p > 1 {
        let name = std::fs::read_link(format!("/proc/{p}/exe")).ok();
        if name.as_deref().and_then(Path::file_name) == Some(exe.as_ref()) {
            return Some(p);
        }
        p = parent_pid(p)?;
    }
    None
}

/// Whether process `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| !s[i + 2..].starts_with('Z') && !s[i + 2..].starts_with('X'))
        })
        .unwrap_or(false)
}

/// Polls until `pid` is gone (or a zombie); false on timeout.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
