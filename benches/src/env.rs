//! The bench environment: one private containerd (from the rund-tests harness)
//! with both runtimes on its PATH, a busybox rootfs, and a ctr client.
//! All containerd plumbing goes through here, so the harness can be swapped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rund_tests::bins::{AGENT_BIN, SHIM_BIN};
use rund_tests::containerd::CTR_BIN;
use rund_tests::{Containerd, ContainerdOpts};
use thiserror::Error;

use crate::cpu::CpuMeter;
use crate::ctr::Ctr;

#[derive(Debug, Error)]
pub enum EnvError {
    #[error(
        "rund binaries ({SHIM_BIN}, {AGENT_BIN}) not found in {0:?}; build them with \
         `cargo build --release -p rund-shim -p rund-agent` or set RUND_BIN_DIR \
         (or measure runc only: --runtimes runc)"
    )]
    RundMissing(Vec<PathBuf>),
    #[error("starting the private containerd: {0}")]
    Containerd(#[source] rund_tests::Error),
    #[error("building the busybox rootfs: {0}")]
    Rootfs(#[source] rund_tests::Error),
}

pub struct BenchEnv {
    pub containerd: Containerd,
    pub rootfs: PathBuf,
    pub ctr: Ctr,
    /// Where rund's binaries were taken from, when rund is measured.
    pub rund_bin_dir: Option<PathBuf>,
    /// The no-op shim is on containerd's PATH (the floor can be measured).
    pub has_floor: bool,
    /// Who spends the CPU time (after `containerd`: dropped once it stopped).
    pub cpu: Option<CpuMeter>,
    /// Why `cpu` is `None`.
    pub cpu_note: Option<String>,
}

impl BenchEnv {
    /// Starts containerd with runc-v2 always and rund when `with_rund`.
    pub fn start(
        with_rund: bool,
        debug: bool,
        ctr_timeout: Duration,
    ) -> Result<BenchEnv, EnvError> {
        let rund_bin_dir = if with_rund {
            let dir = find_rund_bins()?;
            // The harness honours RUND_BIN_DIR first: pin it to what we found
            // (release next to this binary beats the harness's debug default).
            std::env::set_var("RUND_BIN_DIR", &dir);
            Some(dir)
        } else {
            None
        };
        let mut opts = ContainerdOpts::new().with_runc();
        opts.with_rund = with_rund;
        opts.debug = debug;
        let noop = noop_shim();
        opts.path_links.extend(noop.clone());
        let containerd = Containerd::start(opts).map_err(EnvError::Containerd)?;
        let rootfs = containerd.busybox_rootfs().map_err(EnvError::Rootfs)?;
        let meter = containerd
            .pid()
            .ok_or_else(|| "containerd's pid is not known".to_string())
            .and_then(|pid| CpuMeter::start(pid, &containerd.namespace));
        let (cpu, cpu_note) = match meter {
            Ok(m) => (Some(m), None),
            Err(e) => (None, Some(format!("CPU split not measured: {e}"))),
        };
        let ctr = Ctr::new(
            Path::new(CTR_BIN),
            containerd.address(),
            &containerd.namespace,
            ctr_timeout,
        );
        Ok(BenchEnv {
            containerd,
            rootfs,
            ctr,
            rund_bin_dir,
            has_floor: noop.is_some(),
            cpu,
            cpu_note,
        })
    }

    /// The workload binary inside the rootfs (to tell it apart from infra
    /// processes in the density measure).
    pub fn workload_binary(&self) -> PathBuf {
        self.rootfs.join("bin/busybox")
    }

    /// Removes every container left in our namespace. Never timed.
    pub fn sweep(&self) -> usize {
        let ids = self.ctr.containers().unwrap_or_default();
        for id in &ids {
            let _ = self.ctr.remove_everything(id);
        }
        ids.len()
    }
}

/// Copies containerd's log, which holds the shims' logs too (containerd
/// copies each shim's `log` fifo into it), to `out_dir/name` before the
/// instance and its directory go: a failure in any phase can then be read
/// afterwards. Returns a line for the report's notes.
pub fn keep_log(log: &Path, out_dir: &Path, name: &str) -> String {
    let to = out_dir.join(name);
    let copied = std::fs::create_dir_all(out_dir).and_then(|()| std::fs::copy(log, &to));
    match copied {
        Ok(bytes) => format!(
            "containerd's log (with the shims' logs): {} ({} KiB)",
            to.display(),
            bytes.div_ceil(1024)
        ),
        Err(e) => format!(
            "containerd's log could not be kept ({} to {}): {e}",
            log.display(),
            to.display()
        ),
    }
}

/// The no-op shim, built next to this executable.
fn noop_shim() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(crate::runtime::NOOP_SHIM_BIN);
    p.is_file().then_some(p)
}

/// `$RUND_BIN_DIR`, else the directory of this executable (rund-bench is
/// built into the same target/<profile> as the shim), else the target dirs.
pub fn find_rund_bins() -> Result<PathBuf, EnvError> {
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("RUND_BIN_DIR") {
        candidates.push(PathBuf::from(d));
    } else {
        if let Some(d) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            candidates.push(d);
        }
        let mut targets = Vec::new();
        if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
            targets.push(PathBuf::from(t));
        }
        targets.push(rund_tests::bins::workspace_dir().join("target"));
        for t in targets {
            candidates.push(t.join("release"));
            candidates.push(t.join("debug"));
        }
    }
    // containerd resolves PATH entries from its own cwd: make it absolute.
    candidates
        .iter()
        .find(|d| [SHIM_BIN, AGENT_BIN].iter().all(|b| d.join(b).is_file()))
        .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()))
        .ok_or(EnvError::RundMissing(candidates))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_log_copies_the_log_into_the_out_dir_or_says_why_not() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("containerd.log");
        std::fs::write(&log, vec![b'x'; 3000]).unwrap();
        let out = tmp.path().join("a/b");
        let note = keep_log(&log, &out, "containerd-kube.log");
        assert_eq!(
            std::fs::read(out.join("containerd-kube.log"))
                .unwrap()
                .len(),
            3000
        );
        assert!(note.ends_with("containerd-kube.log (3 KiB)"), "{note}");
        let note = keep_log(&tmp.path().join("gone.log"), &out, "x.log");
        assert!(
            note.starts_with("containerd's log could not be kept"),
            "{note}"
        );
        assert!(!out.join("x.log").exists());
    }
}
