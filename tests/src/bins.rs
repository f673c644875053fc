//! Locating rund's binaries and building the private PATH containerd runs with.
//!
//! /usr/bin holds runc, so PATH never contains a system directory: it is one private directory of
//! symlinks to exactly the tools allowed for the run.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// The shim binary containerd resolves for `io.containerd.rund.v2`.
pub const SHIM_BIN: &str = "containerd-shim-rund-v2";
/// The sandbox agent.
pub const AGENT_BIN: &str = "rund-agent";
/// The admin CLI.
pub const CLI_BIN: &str = "rund";

/// Set this to `1` to turn "rund binaries missing" from a skip into a failure (CI, `make test`).
pub const REQUIRE_ENV: &str = "RUND_REQUIRE_BINS";

/// Harmless host tools put on containerd's PATH. None of them is a container runtime.
/// containerd 1.6 itself execs none of them for ctr/CRI with overlayfs; they are there for hooks
/// and shell-outs of shims. `unpigz` is optional (containerd falls back to Go's gzip).
const HOST_TOOLS: &[&str] = &[
    "sh", "bash", "mount", "umount", "cat", "true", "false", "env", "ls", "mkdir", "rm", "ip",
    "nsenter", "unpigz", "modprobe",
];

/// Where rund's three binaries live.
#[derive(Debug, Clone)]
pub struct RundBins {
    /// Directory that holds the binaries.
    pub dir: PathBuf,
}

impl RundBins {
    /// Find the built binaries: `$RUND_BIN_DIR`, else the profile dir of the running test binary,
    /// else `$CARGO_TARGET_DIR/{debug,release}`, else `<workspace>/target/{debug,release}`.
    pub fn find() -> Result<RundBins> {
        let candidates = candidate_dirs();
        for dir in &candidates {
            if [SHIM_BIN, AGENT_BIN]
                .iter()
                .all(|b| is_executable(&dir.join(b)))
            {
                return Ok(RundBins { dir: dir.clone() });
            }
        }
        Err(Error::RundBinsMissing(format!(
            "need {SHIM_BIN} and {AGENT_BIN} in one of {candidates:?}; build them with \
             `cargo build -p rund-shim -p rund-agent` or set RUND_BIN_DIR"
        )))
    }

    /// Path of one binary (it may not exist, e.g. the CLI).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// For tests that need rund: `Some(bins)`, or `None` after [`crate::skip`]ping the test.
/// Panics instead of skipping when `RUND_REQUIRE_BINS=1` (or by the skip policy).
pub fn rund_bins_or_skip(test: &str) -> Option<RundBins> {
    match RundBins::find() {
        Ok(b) => Some(b),
        Err(e) if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") => {
            panic!("{test}: {e} (and {REQUIRE_ENV}=1)")
        }
        Err(e) => crate::skip!("{e}"),
    }
}

fn candidate_dirs() -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os("RUND_BIN_DIR") {
        return vec![PathBuf::from(d)];
    }
    let mut out = Vec::new();
    // <target>/<profile>/deps/<test-binary> -> <target>/<profile>
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile) = exe.parent().and_then(Path::parent) {
            out.push(profile.to_path_buf());
        }
    }
    let mut targets = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        targets.push(PathBuf::from(t));
    }
    targets.push(workspace_dir().join("target"));
    for t in targets {
        out.push(t.join("debug"));
        out.push(t.join("release"));
    }
    out.dedup();
    out
}

/// The workspace root (parent of this crate).
pub fn workspace_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// First executable called `name` in the system directories (never used as PATH itself).
pub fn host_tool(name: &str) -> Option<PathBuf> {
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| is_executable(p))
}

/// Fill `dir` with the symlinks that make up containerd's PATH. `containerd_dir` is the bin
/// dir of the containerd line in use: its own `containerd-shim-runc-v2` wins over Debian's (a
/// 1.6 shim cannot mount what 2.x's snapshotters hand it, e.g. idmapped overlay layers).
pub(crate) fn populate_path_dir(
    dir: &Path,
    rund: Option<&RundBins>,
    with_runc: bool,
    containerd_dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).ctx("create PATH dir", dir)?;
    let link = |target: &Path, name: &str| -> Result<()> {
        let l = dir.join(name);
        symlink(target, &l).ctx("symlink into PATH dir", l)
    };
    for tool in HOST_TOOLS {
        if let Some(p) = host_tool(tool) {
            link(&p, tool)?;
        }
    }
    if let Some(r) = rund {
        for b in [SHIM_BIN, AGENT_BIN, CLI_BIN] {
            let p = r.path(b);
            if is_executable(&p) {
                link(&p, b)?;
            }
        }
    }
    if with_runc {
        for b in ["runc", "containerd-shim-runc-v2"] {
            let own = containerd_dir.join(b);
            let p = Some(own)
                .filter(|p| is_executable(p))
                .or_else(|| host_tool(b))
                .ok_or_else(|| Error::ToolMissing(b.into()))?;
            link(&p, b)?;
        }
    }
    Ok(())
}
