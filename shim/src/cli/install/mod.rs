//! `rund install` / `rund uninstall`: put rund's binaries and config on a node and register
//! the `rund` runtime handler with its containerd, 1.6/1.7 or 2.x; and take exactly that away.
//!
//! containerd 2.x gets a drop-in under config.toml's `imports` (added, with a backup, when
//! there are none), written in config.toml's own config version. containerd 1.x replaces a
//! whole plugin section with an imported file's, so there the runtime tables are appended to
//! config.toml itself, after a timestamped backup. Nothing restarts containerd without
//! `--restart`.

mod apply;
pub mod detect;
pub mod edit;
mod error;
mod fsutil;
pub mod manifest;
pub mod plan;
pub mod snippet;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;

pub use error::InstallError;

use detect::MainConfig;
use manifest::Manifest;

const DEFAULT_CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Binaries go to PREFIX/bin.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// containerd's config.toml.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTAINERD_CONFIG)]
    pub containerd_config: PathBuf,
    /// rund's config; written (with defaults) only when absent [default: `--config`, then
    /// /etc/rund/config.toml].
    #[arg(long, value_name = "PATH")]
    pub rund_config: Option<PathBuf>,
    /// The record of what was installed, for `rund uninstall`.
    #[arg(long, value_name = "PATH", default_value = manifest::DEFAULT_PATH)]
    pub manifest: PathBuf,
    /// Directory with the binaries to install (default: the one this `rund` runs from).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// containerd's version, e.g. `1.6` or `2.1.9` (default: ask `containerd --version`).
    #[arg(long, value_name = "VERSION")]
    pub containerd_version: Option<String>,
    /// The containerd binary asked for its version.
    #[arg(long, value_name = "PATH", default_value = "containerd")]
    pub containerd_bin: String,
    /// Print what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restart containerd (`systemctl restart containerd`) when its config changed.
    #[arg(long)]
    pub restart: bool,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// The record `rund install` kept.
    #[arg(long, value_name = "PATH", default_value = manifest::DEFAULT_PATH)]
    pub manifest: PathBuf,
    /// Print what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restart containerd when its config changed.
    #[arg(long)]
    pub restart: bool,
    /// containerd's config.toml (for the socket to wait on after `--restart`).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTAINERD_CONFIG)]
    pub containerd_config: PathBuf,
}

fn say(out: &mut dyn Write, s: &str) -> Result<(), InstallError> {
    use error::IoCtx;
    writeln!(out, "{s}").ctx("write output", Path::new("<stdout>"))
}

/// `rund install`; returns the exit status. `global_config` is `rund --config`.
pub fn install(
    a: &InstallArgs,
    global_config: Option<&Path>,
    out: &mut dyn Write,
) -> Result<i32, InstallError> {
    let rund_config = a
        .rund_config
        .clone()
        .or_else(|| global_config.map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_PATH));
    for p in [&a.prefix, &a.containerd_config, &rund_config] {
        if p.to_str().is_none() {
            return Err(InstallError::NotUtf8(p.clone()));
        }
    }
    let from = match &a.from {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let cfg = MainConfig::read(&a.containerd_config)?;
    let version_cmd = vec![a.containerd_bin.clone(), "--version".to_owned()];
    let detected = detect::detect(a.containerd_version.as_deref(), &version_cmd, &cfg)?;
    let mut manifest =
        Manifest::load(&a.manifest)?.unwrap_or_else(|| Manifest::new(detected.line.name()));
    let plan = plan::build(&plan::Inputs {
        prefix: &a.prefix,
        rund_config: &rund_config,
        from: &from,
        cfg: &cfg,
        detected,
        manifest: Some(&manifest),
    })?;
    if a.dry_run {
        say(out, "rund install --dry-run: nothing is changed")?;
        apply::describe(&plan, "would", out)?;
        return Ok(0);
    }
    apply::describe(&plan, "will", out)?;
    manifest.containerd_line = plan.detected.line.name().to_owned();
    apply::apply(&plan, &mut manifest, &a.manifest, out)?;
    say(out, &format!("manifest: {}", a.manifest.display()))?;
    finish(plan.restart_needed(), a.restart, &cfg, out)?;
    Ok(0)
}

/// `rund uninstall`; 1 when something was left in place because it changed since install.
pub fn uninstall(a: &UninstallArgs, out: &mut dyn Write) -> Result<i32, InstallError> {
    let Some(mut manifest) = Manifest::load(&a.manifest)? else {
        say(
            out,
            &format!(
                "no install manifest at {}: nothing to uninstall",
                a.manifest.display()
            ),
        )?;
        return Ok(0);
    };
    if a.dry_run {
        say(out, "rund uninstall --dry-run: nothing is changed")?;
    }
    let r = apply::revert(&mut manifest, a.dry_run, out)?;
    if a.dry_run {
        return Ok(0);
    }
    if manifest.files.is_empty() && manifest.config_edits.is_empty() {
        std::fs::remove_file(&a.manifest).map_err(|source| InstallError::Io {
            what: "remove",
            path: a.manifest.clone(),
            source,
        })?;
    } else {
        manifest.save(&a.manifest)?;
    }
    for l in &r.left {
        say(out, &format!("left in place: {l}"))?;
    }
    let cfg = MainConfig::read(&a.containerd_config).ok();
    match cfg {
        Some(cfg) => finish(r.config_changed, a.restart, &cfg, out)?,
        None => finish_no_cfg(r.config_changed, out)?,
    }
    Ok(if r.left.is_empty() { 0 } else { 1 })
}

fn finish_no_cfg(needed: bool, out: &mut dyn Write) -> Result<(), InstallError> {
    let s = if needed { "needed" } else { "not needed" };
    say(out, &format!("containerd restart: {s}"))
}

/// Report the restart decision; restart only when asked to and needed.
fn finish(
    needed: bool,
    restart: bool,
    cfg: &MainConfig,
    out: &mut dyn Write,
) -> Result<(), InstallError> {
    if !needed {
        return say(out, "containerd restart: not needed");
    }
    if !restart {
        return say(
            out,
            "containerd restart: needed, not done (run `systemctl restart containerd`, or pass --restart)",
        );
    }
    let cmd = ["systemctl", "restart", "containerd"];
    say(out, &format!("restarting containerd: {}", cmd.join(" ")))?;
    let st = Command::new(cmd[0])
        .args(&cmd[1..])
        .status()
        .map_err(|e| InstallError::Restart(format!("{}: {e}", cmd.join(" "))))?;
    if !st.success() {
        return Err(InstallError::Restart(format!(
            "{} failed ({st})",
            cmd.join(" ")
        )));
    }
    let socket = cfg.grpc_address.as_deref().unwrap_or(DEFAULT_SOCKET);
    wait_for_socket(
        Path::new(socket.trim_start_matches("unix://")),
        Duration::from_secs(60),
    )?;
    say(out, &format!("containerd is back on {socket}"))
}

fn wait_for_socket(path: &Path, limit: Duration) -> Result<(), InstallError> {
    let deadline = Instant::now() + limit;
    loop {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(InstallError::Restart(format!(
                "containerd did not answer on {} within {}s",
                path.display(),
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests;
