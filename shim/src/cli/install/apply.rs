//! Printing, applying and reverting a plan; every change is recorded in the manifest as it
//! is made, so a failed install can still be uninstalled.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::edit;
use super::error::{InstallError, IoCtx};
use super::fsutil::{self, sha256, sha256_of};
use super::manifest::{ConfigEdit, FileKind, InstalledFile, Manifest};
use super::plan::{Existing, Plan, Step, DEFAULT_RUND_CONFIG};

type Out<'a> = &'a mut dyn Write;

fn w(out: Out, s: String) -> Result<(), InstallError> {
    writeln!(out, "{s}").ctx("write output", Path::new("<stdout>"))
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line (and for config, the text) per step.
pub fn describe(plan: &Plan, verb: &str, out: Out) -> Result<(), InstallError> {
    w(
        out,
        format!(
            "containerd {} ({})",
            plan.detected.line.name(),
            plan.detected.how
        ),
    )?;
    for s in &plan.steps {
        let line = match s {
            Step::Binary { src, dst, state } => match state {
                Existing::Same => format!("unchanged {}", dst.display()),
                Existing::Foreign => format!(
                    "{verb} replace {} (moved aside to a backup) with {}",
                    dst.display(),
                    src.display()
                ),
                _ => format!("{verb} install {} from {}", dst.display(), src.display()),
            },
            Step::RundConfig { dst, present: true } => {
                format!("keep {} (present; never overwritten)", dst.display())
            }
            Step::RundConfig { dst, .. } => format!("{verb} write {} (defaults)", dst.display()),
            Step::CreateConfig { path, content } => format!(
                "{verb} create {} (there is none):\n{}",
                path.display(),
                indent(content)
            ),
            Step::DropIn {
                path,
                state: Existing::Same,
                ..
            } => format!("unchanged drop-in {}", path.display()),
            Step::DropIn { path, content, .. } => format!(
                "{verb} write drop-in {}:\n{}",
                path.display(),
                indent(content)
            ),
            Step::EditConfig { path, edit, .. } => {
                let what = match edit {
                    edit::Edit::AppendedBlock { block } => {
                        format!("append to {}:\n{}", path.display(), indent(block.trim()))
                    }
                    edit::Edit::InsertedImports { lines } => {
                        format!("insert into {}:\n{}", path.display(), indent(lines.trim()))
                    }
                    edit::Edit::AddedImport { import } => {
                        format!("add {import:?} to `imports` in {}", path.display())
                    }
                };
                format!("{verb} back up and {what}")
            }
            Step::Registered { why } => format!("containerd config unchanged: {why}"),
        };
        w(out, line)?;
    }
    for n in &plan.notes {
        w(out, format!("note: {n}"))?;
    }
    let restart = if plan.restart_needed() {
        "needed: containerd reads its config only at start"
    } else {
        "not needed"
    };
    w(out, format!("containerd restart: {restart}"))
}

/// Apply `plan`, recording each change in `manifest` (saved at `manifest_path` after each).
pub fn apply(
    plan: &Plan,
    manifest: &mut Manifest,
    manifest_path: &Path,
    out: Out,
) -> Result<(), InstallError> {
    for s in &plan.steps {
        match s {
            Step::Binary { src, dst, state } => {
                if *state == Existing::Same {
                    continue;
                }
                let replaced = if *state == Existing::Foreign {
                    let b = fsutil::backup_path(dst, std::time::SystemTime::now());
                    std::fs::rename(dst, &b).ctx("move aside", dst)?;
                    w(out, format!("moved {} to {}", dst.display(), b.display()))?;
                    Some(b)
                } else {
                    None
                };
                let bytes = std::fs::read(src).ctx("read", src)?;
                fsutil::write_atomic(dst, &bytes, 0o755)?;
                record(manifest, dst, FileKind::Binary, &bytes, replaced);
                w(out, format!("installed {}", dst.display()))?;
            }
            Step::RundConfig { present: true, .. } => continue,
            Step::RundConfig { dst, .. } => {
                fsutil::write_atomic(dst, DEFAULT_RUND_CONFIG.as_bytes(), 0o644)?;
                record(
                    manifest,
                    dst,
                    FileKind::RundConfig,
                    DEFAULT_RUND_CONFIG.as_bytes(),
                    None,
                );
                w(out, format!("wrote {}", dst.display()))?;
            }
            Step::CreateConfig { path, content } => {
                fsutil::write_atomic(path, content.as_bytes(), 0o644)?;
                record(
                    manifest,
                    path,
                    FileKind::ContainerdConfig,
                    content.as_bytes(),
                    None,
                );
                w(out, format!("created {}", path.display()))?;
            }
            Step::DropIn {
                state: Existing::Same,
                ..
            } => continue,
            Step::DropIn { path, content, .. } => {
                fsutil::write_atomic(path, content.as_bytes(), 0o644)?;
                record(manifest, path, FileKind::DropIn, content.as_bytes(), None);
                w(out, format!("wrote drop-in {}", path.display()))?;
            }
            Step::EditConfig {
                path,
                new_text,
                edit,
                replaces,
            } => {
                let backup = fsutil::backup(path)?;
                fsutil::write_atomic(path, new_text.as_bytes(), fsutil::mode_of(path, 0o644))?;
                if let Some(old) = replaces {
                    manifest
                        .config_edits
                        .retain(|e| !(e.path == *path && e.edit == *old));
                }
                manifest.config_edits.push(ConfigEdit {
                    path: path.clone(),
                    backup: backup.clone(),
                    edit: edit.clone(),
                });
                w(
                    out,
                    format!("edited {} (backup {})", path.display(), backup.display()),
                )?;
            }
            Step::Registered { .. } => continue,
        }
        manifest.save(manifest_path)?;
    }
    manifest.save(manifest_path)
}

fn record(m: &mut Manifest, path: &Path, kind: FileKind, bytes: &[u8], replaced: Option<PathBuf>) {
    m.record_file(InstalledFile {
        path: path.to_path_buf(),
        kind,
        sha256: sha256(bytes),
        replaced,
    });
}

/// What an uninstall did.
#[derive(Debug, Default)]
pub struct Reverted {
    /// Things left in place because they changed since install.
    pub left: Vec<String>,
    pub config_changed: bool,
}

/// Undo what `manifest` records, newest first. With `dry_run`, only say what would happen.
pub fn revert(manifest: &mut Manifest, dry_run: bool, out: Out) -> Result<Reverted, InstallError> {
    let verb = if dry_run { "would " } else { "" };
    let mut r = Reverted::default();
    let mut kept_edits = Vec::new();
    while let Some(e) = manifest.config_edits.pop() {
        let text = std::fs::read_to_string(&e.path).ctx("read", &e.path)?;
        match edit::revert(&text, &e.edit) {
            Ok(new_text) => {
                if !dry_run {
                    let b = fsutil::backup(&e.path)?;
                    let mode = fsutil::mode_of(&e.path, 0o644);
                    fsutil::write_atomic(&e.path, new_text.as_bytes(), mode)?;
                    w(
                        out,
                        format!("backed up {} to {}", e.path.display(), b.display()),
                    )?;
                }
                w(
                    out,
                    format!("{verb}remove rund's edit from {}", e.path.display()),
                )?;
                r.config_changed = true;
            }
            Err(err) => {
                r.left.push(format!("{}: {err}", e.path.display()));
                kept_edits.push(e);
            }
        }
    }
    kept_edits.reverse();
    let mut kept_files = Vec::new();
    while let Some(f) = manifest.files.pop() {
        let now = sha256_of(&f.path)?;
        if now.as_deref() != Some(f.sha256.as_str()) {
            let why = if now.is_none() {
                "is gone"
            } else {
                "changed since install"
            };
            r.left.push(format!("{} {why}", f.path.display()));
            if now.is_some() {
                kept_files.push(f);
            }
            continue;
        }
        if !dry_run {
            std::fs::remove_file(&f.path).ctx("remove", &f.path)?;
            if let Some(prev) = f.replaced.as_ref().filter(|p| p.exists()) {
                std::fs::rename(prev, &f.path).ctx("restore", prev)?;
            }
        }
        match &f.replaced {
            Some(prev) => w(
                out,
                format!("{verb}restore {} from {}", f.path.display(), prev.display()),
            )?,
            None => w(out, format!("{verb}remove {}", f.path.display()))?,
        }
        if matches!(f.kind, FileKind::DropIn | FileKind::ContainerdConfig) {
            r.config_changed = true;
        }
    }
    kept_files.reverse();
    manifest.config_edits = kept_edits;
    manifest.files = kept_files;
    Ok(r)
}
