//! Which containerd line the node runs, and what its config.toml says.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::InstallError;
use super::snippet::{CRI_V2, CRI_V3, RUNTIME};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// containerd 1.6 / 1.7: config version 2; imports replace whole plugin sections.
    One,
    /// containerd 2.x: config version 2 or 3; imports are merged key by key.
    Two,
}

impl Line {
    pub fn name(self) -> &'static str {
        match self {
            Line::One => "1.x",
            Line::Two => "2.x",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub line: Line,
    /// How it was found, for the report.
    pub how: String,
}

/// `containerd github.com/containerd/containerd/v2 2.1.9+unknown` → (2, 1).
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let word = text
        .split_whitespace()
        .map(|w| w.trim_start_matches('v'))
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))?;
    let mut it = word.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn line_of(major: u32, minor: u32, how: String) -> Result<Detected, InstallError> {
    match (major, minor) {
        (1, m) if m >= 6 => Ok(Detected {
            line: Line::One,
            how,
        }),
        (m, _) if m >= 2 => Ok(Detected {
            line: Line::Two,
            how,
        }),
        _ => Err(InstallError::Version(format!(
            "{how}: containerd {major}.{minor} is not supported (1.6 or later)"
        ))),
    }
}

/// The line from `--containerd-version`, else from running `containerd --version`, else from
/// config.toml (`version = 3` is 2.x; anything else is treated as 1.x, whose edit of
/// config.toml containerd 2.x reads as well).
pub fn detect(
    flag: Option<&str>,
    version_cmd: &[String],
    cfg: &MainConfig,
) -> Result<Detected, InstallError> {
    if let Some(v) = flag {
        let (ma, mi) = parse_version(v)
            .or_else(|| parse_version(&format!("{v}.0")))
            .ok_or_else(|| InstallError::Version(format!("--containerd-version {v:?}")))?;
        return line_of(ma, mi, format!("--containerd-version {v}"));
    }
    let shown = version_cmd.join(" ");
    let ran = Command::new(&version_cmd[0])
        .args(&version_cmd[1..])
        .output();
    match ran {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let (ma, mi) = parse_version(&text)
                .ok_or_else(|| InstallError::Version(format!("`{shown}` printed {text:?}")))?;
            line_of(ma, mi, format!("`{shown}`: {}", text.trim()))
        }
        other => {
            let why = match other {
                Ok(out) => format!("`{shown}` failed ({})", out.status),
                Err(e) => format!("`{shown}`: {e}"),
            };
            match cfg.version {
                Some(3) => Ok(Detected {
                    line: Line::Two,
                    how: format!("{why}; {} says version = 3", cfg.path.display()),
                }),
                _ => Ok(Detected {
                    line: Line::One,
                    how: format!(
                        "{why}; assuming containerd 1.x (its config.toml edit also works on 2.x)"
                    ),
                }),
            }
        }
    }
}

/// What rund install needs to know about config.toml.
#[derive(Debug, Clone)]
pub struct MainConfig {
    pub path: PathBuf,
    /// `None`: the file does not exist (containerd runs on its defaults).
    pub text: Option<String>,
    pub version: Option<i64>,
    /// `imports`, as written.
    pub imports: Vec<String>,
    /// The `rund` runtime table, when config.toml itself has one.
    pub rund_table: Option<String>,
    /// `[grpc] address`, for waiting on a restart.
    pub grpc_address: Option<String>,
}

impl MainConfig {
    pub fn read(path: &Path) -> Result<MainConfig, InstallError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(InstallError::Io {
                    what: "read containerd config",
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Self::parse(path, text)
    }

    pub fn parse(path: &Path, text: Option<String>) -> Result<MainConfig, InstallError> {
        let v: toml::Table = match &text {
            Some(t) => toml::from_str(t).map_err(|e| InstallError::ConfigParse {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?,
            None => toml::Table::new(),
        };
        let imports = match v.get("imports") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| InstallError::ConfigUnsupported {
                    path: path.to_path_buf(),
                    reason: "`imports` must be a list of strings".into(),
                })?,
            Some(_) => {
                return Err(InstallError::ConfigUnsupported {
                    path: path.to_path_buf(),
                    reason: "`imports` must be a list of strings".into(),
                })
            }
        };
        Ok(MainConfig {
            path: path.to_path_buf(),
            version: v.get("version").and_then(toml::Value::as_integer),
            imports,
            rund_table: rund_table(&v),
            grpc_address: v
                .get("grpc")
                .and_then(|g| g.get("address"))
                .and_then(toml::Value::as_str)
                .map(str::to_owned),
            text,
        })
    }

    /// The directory a `<dir>/*.toml` import covers (relative imports are relative to
    /// config.toml's directory, as containerd resolves them).
    pub fn drop_in_dir(&self) -> Option<PathBuf> {
        let base = self.path.parent().unwrap_or(Path::new("/"));
        self.imports.iter().find_map(|i| {
            let p = base.join(i);
            (p.file_name()? == "*.toml").then(|| p.parent().map(Path::to_path_buf))?
        })
    }

    /// Where a new `imports` entry points: `<config dir>/conf.d/*.toml`.
    pub fn default_import(&self) -> String {
        let base = self.path.parent().unwrap_or(Path::new("/"));
        base.join("conf.d/*.toml").display().to_string()
    }
}

/// The dotted name of a `rund` runtime table, in either config version.
pub fn rund_table(v: &toml::Table) -> Option<String> {
    for plugin in [CRI_V2, CRI_V3] {
        let found = v
            .get("plugins")
            .and_then(|p| p.get(plugin))
            .and_then(|c| c.get("containerd"))
            .and_then(|c| c.get("runtimes"))
            .and_then(|r| r.get(RUNTIME))
            .is_some();
        if found {
            return Some(format!(
                "plugins.\"{plugin}\".containerd.runtimes.{RUNTIME}"
            ));
        }
    }
    None
}
