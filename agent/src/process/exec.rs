//! A workload from set-up to execve, in runc's order:
//! - [`prepare`]: checks that must fail Create, not Start (cwd, binary,
//!   capability names, the seccomp filter);
//! - [`finalize`]: privileges dropped before the process reports ready, so
//!   a created container that waits for Start is already unprivileged;
//! - [`launch`]: after Start, the late seccomp filter (with no_new_privs),
//!   startContainer hooks, and execve of the workload or of rund-init.

use std::ffi::CString;
use std::os::fd::OwnedFd;
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
    #[error("startContainer hook {index}: {reason}")]
    Hook {
        index: usize,
        reason: crate::container::hooks::HookError,
    },
    #[error("{op}: {errno}")]
    Sys { op: &'static str, errno: Errno },
    #[error("execve {path:?}: {errno}")]
    Exec { path: String, errno: Errno },
}

/// A workload ready to be exec'd once started.
pub struct Prepared {
    pub path: CString,
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    cwd: PathBuf,
    /// The first chdir was refused: retry as the container user.
    chdir_after_user: bool,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    umask: Option<u32>,
    rlimits: Vec<(String, u64, u64)>,
    no_new_privs: bool,
    caps: CapPlan,
    seccomp: Option<ScmpFilterContext>,
    start_hooks: Vec<Hook>,
    /// rund-init (a sealed memfd) to exec as PID 1, and whether it owns a tty.
    pub init: Option<(OwnedFd, bool)>,
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

/// Checks and translates `process` inside the container (after pivot_root).
pub fn prepare(
    p: &Process,
    seccomp_spec: Option<&oci_spec::runtime::LinuxSeccomp>,
    start_hooks: Vec<Hook>,
) -> Result<Prepared, ExecError> {
    let args = p.args().clone().unwrap_or_default();
    let name = args.first().ok_or(ExecError::NoArgs)?;
    let env = p.env().clone().unwrap_or_default();
    let cwd = p.cwd().to_path_buf();
    // As root first; a volume owned by the container user may refuse root
    // (root_squash, or no search permission for others): retry after setuid.
    let chdir_after_user = match nix::unistd::chdir(cwd.as_path()) {
        Ok(()) => false,
        Err(Errno::EACCES | Errno::EPERM) => true,
        Err(errno) => {
            return Err(ExecError::Cwd {
                path: cwd.display().to_string(),
                errno,
            })
        }
    };
    let path = resolve(name, &env)?;
    let caps = caps::plan(p.capabilities().as_ref())?;
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
        cwd,
        chdir_after_user,
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
        init: None,
    })
}

fn rlimit_name(r: &oci_spec::runtime::PosixRlimit) -> String {
    serde_json::to_value(r.typ())
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Drops to the workload's privileges. Without no_new_privs the kernel
/// accepts a seccomp filter only from a process that holds CAP_SYS_ADMIN,
/// so the filter goes in first; with it, as late as possible ([`launch`]).
pub fn finalize(p: &mut Prepared) -> Result<(), ExecError> {
    for (name, soft, hard) in &p.rlimits {
        rlimit::set(name, *soft, *hard)?;
    }
    // Nothing this process holds may reach the workload (CVE-2024-21626):
    // every fd above stdio closes at execve.
    cloexec_from(3)?;
    if !p.no_new_privs {
        if let Some(f) = p.seccomp.take() {
            seccomp::load(&f)?;
        }
    }
    caps::drop_bounding(&p.caps)?;
    user::switch(p.uid, p.gid, &p.groups)?;
    if p.chdir_after_user {
        nix::unistd::chdir(p.cwd.as_path()).map_err(|errno| ExecError::Cwd {
            path: p.cwd.display().to_string(),
            errno,
        })?;
    }
    if let Some(m) = p.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(m));
    }
    caps::apply_sets(&p.caps)?;
    if p.no_new_privs {
        user::no_new_privs()?;
    }
    Ok(())
}

/// After Start: late seccomp, startContainer hooks, execve. Returns only on
/// failure.
pub fn launch(mut p: Prepared, state_json: &str) -> ExecError {
    if let Some(f) = p.seccomp.take() {
        if let Err(e) = seccomp::load(&f) {
            return e.into();
        }
    }
    for (index, h) in p.start_hooks.iter().enumerate() {
        if let Err(reason) = crate::container::hooks::run(h, state_json) {
            return ExecError::Hook { index, reason };
        }
    }
    let errno = match &p.init {
        None => execve(&p.path, &p.args, &p.env),
        Some((fd, tty)) => {
            let mut argv = vec![c"rund-init".to_owned()];
            if *tty {
                argv.push(c"--tty".to_owned());
            }
            argv.push(c"--".to_owned());
            argv.push(p.path.clone());
            argv.extend(p.args.iter().cloned());
            rund_sys::process::fexecve(std::os::fd::AsFd::as_fd(fd), &argv, &p.env)
        }
    };
    ExecError::Exec {
        path: p.path.to_string_lossy().into_owned(),
        errno,
    }
}

fn execve(path: &CString, args: &[CString], env: &[CString]) -> Errno {
    match nix::unistd::execve(path, args, env) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}

fn cloexec_from(first: u32) -> Result<(), ExecError> {
    rund_sys::process::cloexec_from(first).map_err(|errno| ExecError::Sys {
        op: "close_range(CLOSE_RANGE_CLOEXEC)",
        errno,
    })
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
