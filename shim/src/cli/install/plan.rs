//! What `rund install` will do, computed before anything changes: `--dry-run` prints it,
//! a real run applies it.

use std::path::{Path, PathBuf};

use super::detect::{Detected, Line, MainConfig};
use super::edit::{self, Edit};
use super::error::{InstallError, IoCtx};
use super::fsutil::{sha256, sha256_of};
use super::manifest::Manifest;
use super::snippet::{self, Paths, CRI_V2, SHIM_BIN};

/// rund's config as shipped (every key with its default).
pub const DEFAULT_RUND_CONFIG: &str = include_str!("../../../../deploy/config.toml");
/// The binaries every install needs.
pub const REQUIRED: &[&str] = &[SHIM_BIN, "rund-agent", "rund"];
/// Installed when built: an explicit list, so development and test tools built next to rund
/// (rund-bench, rund-probe, ...) never land on a node.
const OPTIONAL: &[&str] = &["rund-init"];

/// How a target file stands before the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Absent,
    /// Already has exactly the new content.
    Same,
    /// Written by an earlier `rund install` (in the manifest).
    Ours,
    /// Someone else's file.
    Foreign,
}

#[derive(Debug, Clone)]
pub enum Step {
    Binary {
        src: PathBuf,
        dst: PathBuf,
        state: Existing,
    },
    /// rund's config; only written when absent.
    RundConfig { dst: PathBuf, present: bool },
    /// A new containerd config.toml (there was none).
    CreateConfig { path: PathBuf, content: String },
    /// The drop-in under config.toml's `imports` (containerd 2.x).
    DropIn {
        path: PathBuf,
        content: String,
        state: Existing,
    },
    /// An edit of config.toml; a timestamped backup is taken first.
    EditConfig {
        path: PathBuf,
        new_text: String,
        edit: Edit,
        /// An earlier install's edit this one replaces.
        replaces: Option<Edit>,
    },
    /// Nothing to change in containerd's config.
    Registered { why: String },
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub detected: Detected,
    pub steps: Vec<Step>,
    /// Things the admin should know (printed, not acted on).
    pub notes: Vec<String>,
}

/// systemd's default PATH, which containerd.service runs with unless it sets its own.
const SYSTEMD_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

impl Plan {
    /// Whether containerd must restart to see the change (it reads its config only at start;
    /// new shim binaries are picked up by the next pod without one).
    pub fn restart_needed(&self) -> bool {
        self.steps.iter().any(|s| match s {
            Step::CreateConfig { .. } | Step::EditConfig { .. } => true,
            Step::DropIn { state, .. } => *state != Existing::Same,
            _ => false,
        })
    }
}

pub struct Inputs<'a> {
    pub prefix: &'a Path,
    pub rund_config: &'a Path,
    pub from: &'a Path,
    pub cfg: &'a MainConfig,
    pub detected: Detected,
    pub manifest: Option<&'a Manifest>,
}

pub fn build(i: &Inputs) -> Result<Plan, InstallError> {
    let mut steps = binaries(i)?;
    steps.push(Step::RundConfig {
        dst: i.rund_config.to_path_buf(),
        present: i.rund_config.exists(),
    });
    let paths = Paths::new(i.prefix, i.rund_config);
    match i.detected.line {
        Line::Two => register_v2x(i, &paths, &mut steps)?,
        Line::One => register_v1x(i, &paths, &mut steps)?,
    }
    let mut notes = Vec::new();
    let bin = i.prefix.join("bin");
    if i.detected.line == Line::One && !SYSTEMD_PATH.iter().any(|d| bin == Path::new(d)) {
        notes.push(format!(
            "containerd 1.6.20 and older ignore `runtime_path` (fixed in 1.6.21): put {} on \
             containerd's PATH",
            bin.display()
        ));
    }
    if let (Line::Two, Some(cfg)) = (i.detected.line, paths.custom_config()) {
        notes.push(format!(
            "containerd 2.x passes rund no config path: set RUND_CONFIG={} in containerd's \
             environment (e.g. a systemd drop-in's Environment=), or rund reads {}",
            cfg.display(),
            crate::config::DEFAULT_PATH
        ));
    }
    Ok(Plan {
        detected: i.detected.clone(),
        steps,
        notes,
    })
}

fn state_of(path: &Path, content: &[u8], m: Option<&Manifest>) -> Result<Existing, InstallError> {
    Ok(match sha256_of(path)? {
        None => Existing::Absent,
        Some(h) if h == sha256(content) => Existing::Same,
        Some(h) if m.and_then(|m| m.file(path)).is_some_and(|f| f.sha256 == h) => Existing::Ours,
        Some(_) => Existing::Foreign,
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn binaries(i: &Inputs) -> Result<Vec<Step>, InstallError> {
    let mut names: Vec<String> = REQUIRED.iter().map(|s| (*s).to_owned()).collect();
    for n in REQUIRED {
        let p = i.from.join(n);
        if !is_executable(&p) {
            return Err(InstallError::MissingBinary {
                path: p,
                reason: format!(
                    "not an executable file (pass --from DIR with {})",
                    REQUIRED.join(", ")
                ),
            });
        }
    }
    names.extend(
        OPTIONAL
            .iter()
            .filter(|n| is_executable(&i.from.join(n)))
            .map(|n| (*n).to_owned()),
    );
    names
        .into_iter()
        .map(|n| {
            let src = i.from.join(&n);
            let dst = i.prefix.join("bin").join(&n);
            let bytes = std::fs::read(&src).ctx("read", &src)?;
            Ok(Step::Binary {
                state: state_of(&dst, &bytes, i.manifest)?,
                src,
                dst,
            })
        })
        .collect()
}

fn unsupported(cfg: &MainConfig, reason: String) -> InstallError {
    InstallError::ConfigUnsupported {
        path: cfg.path.clone(),
        reason,
    }
}

/// A config.toml rund wrote itself, for a node that had none.
pub fn new_main_config(line: Line, import: &str, paths: &Paths) -> String {
    let head =
        "# Written by `rund install` (there was no config.toml); `rund uninstall` removes it.\n";
    match line {
        Line::Two => format!(
            "{head}version = 3\nimports = [{}]\n",
            toml::Value::String(import.to_owned())
        ),
        Line::One => format!("{head}version = 2\n\n{}", snippet::v2_tables(paths)),
    }
}

/// The earlier install's edit of this config.toml, if any.
fn our_edit<'m>(i: &Inputs<'m>, pred: impl Fn(&Edit) -> bool) -> Option<&'m Edit> {
    i.manifest?
        .config_edits
        .iter()
        .find(|e| e.path == i.cfg.path && pred(&e.edit))
        .map(|e| &e.edit)
}

fn register_v2x(i: &Inputs, paths: &Paths, steps: &mut Vec<Step>) -> Result<(), InstallError> {
    let cfg = i.cfg;
    let Some(text) = &cfg.text else {
        let import = cfg.default_import();
        let dir = PathBuf::from(&import).parent().map(Path::to_path_buf);
        let dir = dir.unwrap_or_else(|| PathBuf::from("/etc/containerd/conf.d"));
        steps.push(Step::CreateConfig {
            path: cfg.path.clone(),
            content: new_main_config(Line::Two, &import, paths),
        });
        return drop_in(i, dir, paths, 3, steps);
    };
    let version = match cfg.version {
        Some(v @ (2 | 3)) => v,
        other => {
            return Err(unsupported(
                cfg,
                format!(
                    "{} on containerd 2.x, which reads it as version 1; migrate it first \
                     (`containerd config migrate`)",
                    other.map_or("no `version`".to_owned(), |v| format!("version = {v}"))
                ),
            ))
        }
    };
    if let Some(table) = &cfg.rund_table {
        return Err(InstallError::AlreadyRegistered {
            path: cfg.path.clone(),
            table: table.clone(),
        });
    }
    let dir = match cfg.drop_in_dir() {
        Some(d) => d,
        None => {
            let import = cfg.default_import();
            let (new_text, edit) = edit::add_import(text, &import)
                .map_err(|e| unsupported(cfg, format!("adding imports = [{import:?}]: {e}")))?;
            steps.push(Step::EditConfig {
                path: cfg.path.clone(),
                new_text,
                edit,
                replaces: None,
            });
            PathBuf::from(&import)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
        }
    };
    drop_in(i, dir, paths, version, steps)
}

fn drop_in(
    i: &Inputs,
    dir: PathBuf,
    paths: &Paths,
    version: i64,
    steps: &mut Vec<Step>,
) -> Result<(), InstallError> {
    let path = dir.join("rund.toml");
    let content = snippet::drop_in(paths, version);
    let state = state_of(&path, content.as_bytes(), i.manifest)?;
    if state == Existing::Foreign {
        return Err(InstallError::Foreign { path });
    }
    steps.push(Step::DropIn {
        path,
        content,
        state,
    });
    Ok(())
}

fn register_v1x(i: &Inputs, paths: &Paths, steps: &mut Vec<Step>) -> Result<(), InstallError> {
    let cfg = i.cfg;
    let Some(text) = &cfg.text else {
        steps.push(Step::CreateConfig {
            path: cfg.path.clone(),
            content: new_main_config(Line::One, "", paths),
        });
        return Ok(());
    };
    if cfg.version != Some(2) {
        return Err(unsupported(
            cfg,
            "containerd 1.x reads a config without `version = 2` as version 1, whose CRI \
             section rund does not edit; migrate it to version 2 first"
                .into(),
        ));
    }
    for file in imported_files(cfg) {
        let defines_cri = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
            .is_some_and(|t| t.get("plugins").and_then(|p| p.get(CRI_V2)).is_some());
        if defines_cri {
            return Err(unsupported(
                cfg,
                format!(
                    "the imported {} has a [plugins.\"{CRI_V2}\"] section, which replaces \
                     config.toml's whole CRI section on containerd 1.x: add the tables that \
                     `rund install --dry-run` prints there",
                    file.display()
                ),
            ));
        }
    }
    let tables = snippet::v2_tables(paths);
    let earlier = our_edit(i, |e| matches!(e, Edit::AppendedBlock { .. }));
    let mut base = text.clone();
    if let Some(old) = earlier {
        let Edit::AppendedBlock { block } = old else {
            unreachable!("filtered above")
        };
        if text.contains(block.as_str()) {
            if block.contains(&edit::block(&tables)) {
                steps.push(Step::Registered {
                    why: format!("{} already has rund's block", cfg.path.display()),
                });
                return Ok(());
            }
            base = edit::revert(text, old).map_err(|e| unsupported(cfg, e.to_string()))?;
        }
    }
    let base_cfg = MainConfig::parse(&cfg.path, Some(base.clone()))?;
    if let Some(table) = base_cfg.rund_table {
        return Err(InstallError::AlreadyRegistered {
            path: cfg.path.clone(),
            table,
        });
    }
    let (new_text, edit) =
        edit::append_block(&base, &tables).map_err(|e| unsupported(cfg, e.to_string()))?;
    steps.push(Step::EditConfig {
        path: cfg.path.clone(),
        new_text,
        edit,
        replaces: earlier.cloned(),
    });
    Ok(())
}

/// The files config.toml's `imports` name (globs expanded).
fn imported_files(cfg: &MainConfig) -> Vec<PathBuf> {
    let base = cfg.path.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for i in &cfg.imports {
        let p = base.join(i);
        if p.file_name().is_some_and(|n| n == "*.toml") {
            let dir = p.parent().unwrap_or(Path::new("/"));
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "toml"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p);
        }
    }
    out
}
