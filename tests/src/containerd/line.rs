//! Which containerd the tests run: Debian 12's 1.6 in /usr/bin (default), or Debian sid's 2.1
//! unpacked into a cache dir by `tests/scripts/fetch-containerd.sh` (never installed).
//!
//! `RUND_IT_CONTAINERD` selects it: unset or `1.6` → /usr/bin; `2.1` (or any `X.Y`) →
//! `${RUND_CACHE:-/var/cache/rund}/containerd-X.Y/usr/bin`; an absolute path → that bin dir.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::bins::is_executable;
use crate::cmd;
use crate::error::{Error, Result};

/// Selects the containerd line (see the module doc).
pub const LINE_ENV: &str = "RUND_IT_CONTAINERD";
/// Root of the cache the fetch script unpacks into.
pub const CACHE_ENV: &str = "RUND_CACHE";
pub const DEFAULT_CACHE: &str = "/var/cache/rund";
/// Debian 12's containerd lives here.
pub const SYSTEM_BIN_DIR: &str = "/usr/bin";

/// One containerd installation: its binaries and the version it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdBins {
    pub dir: PathBuf,
    /// `containerd --version`'s version field, e.g. `1.6.20~ds1` or `2.1.9+unknown`.
    pub version: String,
    pub major: u32,
    pub minor: u32,
}

impl ContainerdBins {
    pub fn containerd(&self) -> PathBuf {
        self.dir.join("containerd")
    }
    pub fn ctr(&self) -> PathBuf {
        self.dir.join("ctr")
    }
    /// containerd 2.x: config version 3, CRI split into `io.containerd.cri.v1.*` plugins.
    pub fn is_v2(&self) -> bool {
        self.major >= 2
    }
    /// `1.6`, `2.1`: for messages and test names.
    pub fn series(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// Probe the binaries in `dir`: both must exist and `containerd --version` must parse.
    pub fn probe(dir: &Path) -> Result<ContainerdBins> {
        let containerd = dir.join("containerd");
        for b in [&containerd, &dir.join("ctr")] {
            if !is_executable(b) {
                return Err(Error::ToolMissing(format!(
                    "{} ({})",
                    b.display(),
                    hint_for(dir)
                )));
            }
        }
        let mut c = Command::new(&containerd);
        c.arg("--version");
        let out = cmd::run(c, None, Duration::from_secs(20))?.check()?;
        let (major, minor, version) = parse_version(&out.stdout).ok_or_else(|| Error::Parse {
            cmd: format!("{} --version", containerd.display()),
            detail: format!("no version in {:?}", out.stdout),
        })?;
        Ok(ContainerdBins {
            dir: dir.to_path_buf(),
            version,
            major,
            minor,
        })
    }
}

fn hint_for(dir: &Path) -> String {
    if dir == Path::new(SYSTEM_BIN_DIR) {
        "Debian package containerd".into()
    } else {
        "fetch it with `make containerd-2.1` (tests/scripts/fetch-containerd.sh)".into()
    }
}

/// `containerd github.com/containerd/containerd/v2 2.1.9+unknown` → (2, 1, "2.1.9+unknown").
pub fn parse_version(text: &str) -> Option<(u32, u32, String)> {
    let word = text.split_whitespace().find(|w| {
        w.trim_start_matches('v')
            .starts_with(|c: char| c.is_ascii_digit())
    })?;
    let v = word.trim_start_matches('v');
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor, v.to_owned()))
}

/// The bin dir `RUND_IT_CONTAINERD` names (see the module doc).
pub fn selected_dir() -> PathBuf {
    dir_for(std::env::var(LINE_ENV).ok().as_deref())
}

/// The bin dir for a `RUND_IT_CONTAINERD` value.
pub fn dir_for(sel: Option<&str>) -> PathBuf {
    match sel.map(str::trim) {
        None | Some("") | Some("1.6") | Some("system") => PathBuf::from(SYSTEM_BIN_DIR),
        Some(p) if p.starts_with('/') => PathBuf::from(p),
        Some(series) => cached_dir(series),
    }
}

/// Where the fetch script unpacks containerd `series` (`2.1`).
pub fn cached_dir(series: &str) -> PathBuf {
    let cache = std::env::var_os(CACHE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE));
    cache.join(format!("containerd-{series}")).join("usr/bin")
}

/// The selected containerd, probed once per test process.
pub fn selected() -> Result<ContainerdBins> {
    static SELECTED: OnceLock<std::result::Result<ContainerdBins, String>> = OnceLock::new();
    SELECTED
        .get_or_init(|| ContainerdBins::probe(&selected_dir()).map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::ToolMissing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_both_lines_parse() {
        let v16 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n";
        assert_eq!(parse_version(v16), Some((1, 6, "1.6.20~ds1".into())));
        let v21 = "containerd github.com/containerd/containerd/v2 2.1.9+unknown \n";
        assert_eq!(parse_version(v21), Some((2, 1, "2.1.9+unknown".into())));
        let upstream = "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7\n";
        assert_eq!(parse_version(upstream), Some((2, 1, "2.1.4".into())));
        assert_eq!(parse_version("containerd version unknown"), None);
    }

    #[test]
    fn selection_maps_to_dirs() {
        assert_eq!(dir_for(None), PathBuf::from("/usr/bin"));
        assert_eq!(dir_for(Some("1.6")), PathBuf::from("/usr/bin"));
        assert_eq!(dir_for(Some("/opt/c/bin")), PathBuf::from("/opt/c/bin"));
        let d = dir_for(Some("2.1"));
        assert!(d.ends_with("containerd-2.1/usr/bin"), "{}", d.display());
    }

    #[test]
    fn a_missing_dir_names_the_fetch_step() {
        let e = ContainerdBins::probe(Path::new("/nonexistent/rund-ctrd")).unwrap_err();
        assert!(e.to_string().contains("make containerd-2.1"), "{e}");
    }
}
