//! File helpers: atomic writes, content hashes, timestamped backups.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::error::{InstallError, IoCtx};

pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// sha256 of the file, `None` if it does not exist.
pub fn sha256_of(path: &Path) -> Result<Option<String>, InstallError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(sha256(&b))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).ctx("read", path),
    }
}

/// Write `bytes` to a temp file next to `path` and rename it over `path`: readers (a
/// starting containerd, a shim being exec'd) see the old or the new file, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).ctx("create directory", dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.rund-tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .ctx("create", &tmp)?;
        f.write_all(bytes).ctx("write", &tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .ctx("chmod", &tmp)?;
        f.sync_all().ctx("sync", &tmp)?;
        std::fs::rename(&tmp, path).ctx("rename into place", path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The mode bits of an existing file (to keep them on rewrite), else `default`.
pub fn mode_of(path: &Path, default: u32) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(default)
}

/// `config.toml` → `config.toml.rund-backup-20261124T062400Z` (a free name).
pub fn backup_path(path: &Path, now: SystemTime) -> PathBuf {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let stamp = utc_stamp(secs);
    let base = format!("{}.rund-backup-{stamp}", path.display());
    let mut p = PathBuf::from(&base);
    let mut n = 1;
    while p.exists() {
        p = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    p
}

/// Copy `path` to a fresh timestamped backup; returns the backup's path.
pub fn backup(path: &Path) -> Result<PathBuf, InstallError> {
    let b = backup_path(path, SystemTime::now());
    let bytes = std::fs::read(path).ctx("read for backup", path)?;
    write_atomic(&b, &bytes, mode_of(path, 0o644))?;
    Ok(b)
}

/// `YYYYMMDDTHHMMSSZ` for seconds since the epoch (UTC, proleptic Gregorian).
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
