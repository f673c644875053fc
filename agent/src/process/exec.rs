//! Preparing a workload (checks that must fail CreateProcess, not Start) and
//! the final sequence of attribute changes before execve.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use libseccomp::ScmpFilterContext;
use nix::errno::Errno;
use oci_spec::runtime::{Hook, Process};

use super::caps::{self, CapPlan};
use super::{rlimit, seccomp, user};

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("process.args is empty")]
    NoArgs,
    #[error("argument or environment contains a NUL byte")]
    Nul,
    #[error("cwd {path:?} does not exist in the container: {errno}")]
    Cwd { path: String, errno: Errno },
    #[error("executable file {name:?} not found in $PATH (PATH={path})")]
    NotFound { name: String, path: String },
    #[error("{path:?} is not an executable file: {reason}")]
    NotExecutable { path: String, reason: String },
    #[error(transparent)]
    Rlimit(#[from] rlimit::RlimitError),
    #[error(transparent)]
    Caps(#[from] caps::CapsError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    User(#[from] user::UserError),
    #[error("{0}")]
    Hook(String),
    #[error("execve {path:?}: {errno}")]
    Exec { path: String, errno: Errno },
}

/// A workload ready to be exec'd once started.
pub struct Prepared {
    pub path: CString,
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub umask: Option<u32>,
    pub rlimits: Vec<(String, u64, u64)>,
    pub no_new_privs: bool,
    pub caps: Option<CapPlan>,
    pub seccomp: Option<ScmpFilterContext>,
    pub start_hooks: Vec<Hook>,
    pub state_json: String,
}

fn cstrings(v: &[String]) -> Result<Vec<CString>, ExecError> {
    v.iter()
        .map(|s| CString::new(s.as_bytes()).map_err(|_| ExecError::Nul))
        .collect()
}

/// Finds `name` like execvp would, with the process' own PATH.
pub fn resolve(name: &str, env: &[String]) -> Result<PathBuf, ExecError> {
    let path_var = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH);
    if name.contains('/') {
        check_executable(Path::new(name))?;
        return Ok(PathBuf::from(name));
    }
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let cand = Path::new(dir).join(name);
        if check_executable(&cand).is_ok() {
            return Ok(cand);
        }
    }
    Err(ExecError::NotFound {
        name: name.into(),
        path: path_var.into(),
    })
}

fn check_executable(p: &Path) -> Result<(), ExecError> {
    let bad = |reason: String| ExecError::NotExecutable {
        path: p.display().to_string(),
        reason,
    };
    let md = std::fs::metadata(p).map_err(|e| bad(e.to_string()))?;
    if !md.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if md.permissions().mode() & 0o111 == 0 {
        return Err(bad("no execute permission".into()));
    }
    Ok(())
}

/// Checks and translates `process` inside the container (after pivot_root):
/// cwd, binary, capabilities and the seccomp filter.
pub fn prepare(
    p: &Process,
    seccomp_spec: Option<&oci_spec::runtime::LinuxSeccomp>,
    start_hooks: Vec<Hook>,
    state_json: String,
) -> Result<Prepared, ExecError> {
    let args = p.args().clone().unwrap_or_default();
    let name = args.first().ok_or(ExecError::NoArgs)?;
    let env = p.env().clone().unwrap_or_default();
    let cwd = p.cwd();
    nix::unistd::chdir(cwd.as_path()).map_err(|errno| ExecError::Cwd {
        path: cwd.display().to_string(),
        errno,
    })?;
    let path = resolve(name, &env)?;
    let caps = p
        .capabilities()
        .as_ref()
        .map(|c| caps::plan(Some(c)))
        .transpose()?;
    let seccomp = match seccomp_spec {
        Some(s) => {
            let (ctx, skipped) = seccomp::build(&seccomp::plan(s)?)?;
            if !skipped.is_empty() {
                crate::debug!("seccomp: skipped unknown syscalls {skipped:?}");
            }
            Some(ctx)
        }
        None => None,
    };
    let u = p.user();
    Ok(Prepared {
        path: CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| ExecError::Nul)?,
        args: cstrings(&args)?,
        env: cstrings(&env)?,
        uid: u.uid(),
        gid: u.gid(),
        groups: u.additional_gids().clone().unwrap_or_default(),
        umask: u.umask(),
        rlimits: p
            .rlimits()
            .iter()
            .flatten()
            .map(|r| (rlimit_name(r), r.soft(), r.hard()))
            .collect(),
        no_new_privs: p.no_new_privileges().unwrap_or(false),
        caps,
        seccomp,
        start_hooks,
        state_json,
    })
}

fn rlimit_name(r: &oci_spec::runtime::PosixRlimit) -> String {
    serde_json::to_value(r.typ())
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Applies every attribute and execs. Returns only on failure.
pub fn exec(p: Prepared) -> ExecError {
    match apply(&p) {
        Err(e) => e,
        Ok(()) => ExecError::Exec {
            path: p.path.to_string_lossy().into_owned(),
            errno: execve(&p),
        },
    }
}

fn apply(p: &Prepared) -> Result<(), ExecError> {
    for (name, soft, hard) in &p.rlimits {
        rlimit::set(name, *soft, *hard)?;
    }
    if let Some(c) = &p.caps {
        caps::drop_bounding(c)?;
    }
    user::switch(p.uid, p.gid, &p.groups)?;
    if let Some(m) = p.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
    }
    if let Some(c) = &p.caps {
        caps::apply_sets(c)?;
    }
    if p.no_new_privs {
        user::no_new_privs()?;
    }
    crate::sys::raw::close_from(3)
        .map_err(|errno| ExecError::Hook(format!("close_range: {errno}")))?;
    if let Some(f) = &p.seccomp {
        seccomp::load(f)?;
    }
    for (i, h) in p.start_hooks.iter().enumerate() {
        crate::container::hooks::run(
            crate::container::hooks::Exe::Path(h.path()),
            h,
            &p.state_json,
        )
        .map_err(|e| ExecError::Hook(format!("startContainer hook {i}: {e}")))?;
    }
    Ok(())
}

fn execve(p: &Prepared) -> Errno {
    match nix::unistd::execve(&p.path, &p.args, &p.env) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_uses_the_process_path() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("tool");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let env = vec![format!("PATH=/nonexistent:{}", d.path().display())];
        assert!(matches!(
            resolve("tool", &env),
            Err(ExecError::NotExecutable { .. }) | Err(ExecError::NotFound { .. })
        ));
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve("tool", &env).unwrap(), bin);
        let err = resolve("missing-tool", &env).unwrap_err().to_string();
        assert!(
            err.contains("missing-tool") && err.contains("/nonexistent"),
            "{err}"
        );
        let err = resolve(d.path().to_str().unwrap(), &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
