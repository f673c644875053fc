//! Small helpers to read and write control files with error context.

use crate::error::{Error, Result};
use crate::fs::CgroupFs;
use std::path::Path;

/// Write `value` to `dir/file`; the error names the file and the value.
pub(crate) fn write(fs: &dyn CgroupFs, dir: &Path, file: &str, value: &str) -> Result<()> {
    let path = dir.join(file);
    tracing::trace!(path = %path.display(), value, "cgroup write");
    fs.write(&path, value).map_err(|source| Error::Write {
        path,
        value: value.to_string(),
        source,
    })
}

/// Write each of `values` to `dir/file` with a write(2) of its own, in
/// order, through one open file; the error names the value refused.
pub(crate) fn write_each(
    fs: &dyn CgroupFs,
    dir: &Path,
    file: &str,
    values: &[String],
) -> Result<()> {
    let path = dir.join(file);
    tracing::trace!(path = %path.display(), ?values, "cgroup writes");
    fs.write_each(&path, values)
        .map_err(|(i, source)| Error::Write {
            value: values.get(i).cloned().unwrap_or_default(),
            path,
            source,
        })
}

/// Write only if the control file exists (optional kernel features).
pub(crate) fn write_if_exists(
    fs: &dyn CgroupFs,
    dir: &Path,
    file: &str,
    value: &str,
) -> Result<bool> {
    if !fs.exists(&dir.join(file)) {
        return Ok(false);
    }
    write(fs, dir, file, value).map(|()| true)
}

pub(crate) fn read(fs: &dyn CgroupFs, dir: &Path, file: &str) -> Result<String> {
    let path = dir.join(file);
    fs.read(&path).map_err(|e| Error::io("read", path, e))
}

/// Read a single number; `max` reads as `u64::MAX`.
pub(crate) fn read_u64(fs: &dyn CgroupFs, dir: &Path, file: &str) -> Result<u64> {
    let s = read(fs, dir, file)?;
    parse_u64(s.trim()).ok_or_else(|| Error::Parse {
        path: dir.join(file),
        reason: format!("not a number: {:?}", s.trim()),
    })
}

/// Like [`read_u64`] but a missing file gives `None`.
pub(crate) fn read_u64_opt(fs: &dyn CgroupFs, dir: &Path, file: &str) -> Result<Option<u64>> {
    if !fs.exists(&dir.join(file)) {
        return Ok(None);
    }
    read_u64(fs, dir, file).map(Some)
}

pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    if s == "max" {
        return Some(u64::MAX);
    }
    s.parse::<u64>().ok().or_else(|| {
        s.parse::<i64>()
            .ok()
            .map(|v| if v < 0 { u64::MAX } else { v as u64 })
    })
}

/// Parse `key value` lines (memory.stat, cpu.stat, memory.events, ...).
pub(crate) fn read_kv(fs: &dyn CgroupFs, dir: &Path, file: &str) -> Result<Vec<(String, u64)>> {
    let s = read(fs, dir, file)?;
    Ok(s.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = parse_u64(it.next()?)?;
            Some((k.to_string(), v))
        })
        .collect())
}

pub(crate) fn kv_get(kv: &[(String, u64)], key: &str) -> Option<u64> {
    kv.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Pids in `cgroup.procs` of `dir`.
pub(crate) fn procs(fs: &dyn CgroupFs, dir: &Path) -> Result<Vec<i32>> {
    let s = read(fs, dir, "cgroup.procs")?;
    Ok(s.lines().filter_map(|l| l.trim().parse().ok()).collect())
}
