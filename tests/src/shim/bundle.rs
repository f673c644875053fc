//! A scratch directory per direct shim: the bundle (the shim's cwd, with `config.json` and the
//! `log` file the shim writes to), the shim's socket and the fake events socket.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};

use super::error::{IoCtx, Result};
use crate::leaks::mount_points_under;

/// Base of every direct-test scratch dir.
pub const DIRECT_BASE: &str = "/tmp/rund-direct";

/// The shim namespace the direct tests use.
pub const NAMESPACE: &str = "rit-direct";

/// One scratch dir; removed on drop (after [`crate::shim::ShimServer`] has unmounted it).
pub struct Bundle {
    scratch: Option<tempfile::TempDir>,
    /// The bundle dir: the shim's cwd.
    pub path: PathBuf,
    /// The container id this bundle is for.
    pub id: String,
    /// The unique `linux.cgroupsPath` of [`Bundle::spec`]: `/rit-direct-<pid>/<id>`.
    pub cgroups_path: String,
}

/// The cgroup parent every direct test of this process uses.
pub fn cgroup_parent() -> String {
    format!("/{NAMESPACE}-{}", std::process::id())
}

/// A container id unique within this test process.
pub fn unique_id(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", N.fetch_add(1, Ordering::SeqCst))
}

impl Bundle {
    /// A fresh scratch dir with an empty bundle for container `id` (no config.json yet) and an
    /// empty regular `log` file, so the shim's log can be read back.
    pub fn new(id: &str) -> Result<Bundle> {
        std::fs::create_dir_all(DIRECT_BASE).io("create direct base", DIRECT_BASE)?;
        let scratch = tempfile::Builder::new()
            .prefix("d")
            .tempdir_in(DIRECT_BASE)
            .io("create scratch dir", DIRECT_BASE)?;
        let path = scratch.path().join("bundle");
        std::fs::create_dir(&path).io("create bundle", &path)?;
        std::fs::write(path.join("log"), "").io("create log", path.join("log"))?;
        Ok(Bundle {
            path,
            id: id.to_string(),
            cgroups_path: format!("{}/{id}", cgroup_parent()),
            scratch: Some(scratch),
        })
    }

    /// The scratch dir (sockets live here, outside the bundle).
    pub fn scratch(&self) -> &Path {
        self.scratch
            .as_ref()
            .expect("scratch lives until drop")
            .path()
    }

    /// Writes `config.json` verbatim.
    pub fn write_config_raw(&self, text: &str) -> Result<()> {
        let p = self.path.join("config.json");
        std::fs::write(&p, text).io("write config.json", p)
    }

    /// Writes `spec` as `config.json`.
    pub fn write_config(&self, spec: &Value) -> Result<()> {
        self.write_config_raw(&serde_json::to_string_pretty(spec).expect("a Value serializes"))
    }

    /// What the shim logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path.join("log")).unwrap_or_default()
    }

    /// A runnable spec in the shape `ctr run --rootfs` sends: absolute `root.path`, new pid,
    /// ipc, uts, mount and network namespaces, the usual mounts, and this bundle's unique
    /// cgroups path.
    pub fn spec(&self, rootfs: &Path, args: &[&str]) -> Value {
        default_spec(rootfs, args, &self.cgroups_path)
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        super::server::unmount_under(&self.path);
        if !mount_points_under(std::slice::from_ref(&self.path)).is_empty() {
            // Never remove_dir_all through a mount (it could be a host rootfs): keep the dir.
            if let Some(s) = self.scratch.take() {
                let kept = s.keep();
                eprintln!("keeping {}: mounts remain under it", kept.display());
            }
        }
    }
}

/// The container's environment.
pub const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// containerd 1.6's default spec (`ctr oci spec`), made runnable.
pub fn default_spec(rootfs: &Path, args: &[&str], cgroups_path: &str) -> Value {
    let mut process = exec_process(args);
    process["rlimits"] = json!([{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }]);
    json!({
        "ociVersion": "1.0.2-dev",
        "process": process,
        "root": { "path": rootfs.display().to_string(), "readonly": false },
        "hostname": "direct",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc",
              "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
            { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
              "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"] },
            { "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
              "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] },
            { "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
              "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/sys", "type": "sysfs", "source": "sysfs",
              "options": ["nosuid", "noexec", "nodev", "ro"] },
            { "destination": "/run", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] }
        ],
        "linux": {
            "resources": { "devices": [{ "allow": false, "access": "rwm" }] },
            "cgroupsPath": cgroups_path,
            "namespaces": [
                { "type": "pid" }, { "type": "ipc" }, { "type": "uts" },
                { "type": "mount" }, { "type": "network" }
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                "/proc/sched_debug", "/sys/firmware", "/proc/scsi"
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
            ]
        }
    })
}

/// An exec's process spec as containerd sends it: JSON of an OCI `Process`.
pub fn exec_process(args: &[&str]) -> Value {
    json!({
        "terminal": false,
        "user": { "uid": 0, "gid": 0 },
        "args": args,
        "env": [PATH_ENV],
        "cwd": "/",
        "capabilities": { "bounding": CAPS, "effective": CAPS, "permitted": CAPS },
        "noNewPrivileges": true
    })
}
