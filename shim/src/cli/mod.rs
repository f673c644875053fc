//! The `rund` admin CLI: doctor, pool, devices, cdi, check, userns, install and uninstall.

pub mod check;
pub mod devices;
pub mod doctor;
pub mod error;
pub mod helper;
pub mod install;
pub mod pool;
pub mod userns;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use error::CliError;

use crate::config::RundConfig;

#[derive(Debug, Parser)]
#[command(
    name = "rund",
    about = "Admin CLI of the rund container runtime",
    version
)]
pub struct Cli {
    /// rund config file (default: $RUND_CONFIG, then /etc/rund/config.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check memlock, capabilities, cgroups, user namespaces and devices.
    Doctor {
        #[arg(long)]
        json: bool,
        /// Inspect this process instead (e.g. containerd's pid: its shims inherit its limits).
        #[arg(long)]
        pid: Option<i32>,
    },
    /// The node-wide cgroup pool.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// List the GPUs and RDMA devices rund can inject.
    Devices {
        #[arg(long)]
        json: bool,
    },
    /// Container Device Interface specs.
    #[command(subcommand)]
    Cdi(CdiCommand),
    /// Device checks.
    #[command(subcommand)]
    Check(CheckCommand),
    /// User-namespace id leases.
    #[command(subcommand)]
    Userns(UsernsCommand),
    /// Install rund's binaries and config and register it with containerd (1.6/1.7 or 2.x).
    Install(install::InstallArgs),
    /// Remove exactly what `rund install` installed and registered.
    Uninstall(install::UninstallArgs),
    /// What the static shim runs in a dynamic process (NVML, write_bw).
    #[command(subcommand, hide = true)]
    Helper(helper::HelperCommand),
}

#[derive(Debug, Subcommand)]
pub enum UsernsCommand {
    /// The leased id ranges and their owners.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Move a corrupt lease file aside and rebuild it from live namespaces.
    Repair,
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Free and claimed slots and counters of each pool.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Pre-create free slots under a cgroupsPath parent (e.g. `/k8s.io`) so
    /// that a burst of starts never waits for mkdir. Capped at `high`.
    Warm {
        /// The parent the containers' cgroupsPaths share.
        parent: String,
        /// Free slots wanted.
        #[arg(long, default_value_t = 64)]
        slots: usize,
    },
    /// Remove half-made, orphaned and surplus slots.
    Gc {
        /// Also remove every free slot.
        #[arg(long)]
        drain: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum CdiCommand {
    /// Write CDI specs for the discovered GPUs and RDMA devices.
    Generate(CdiGenerateArgs),
}

#[derive(Debug, Args)]
pub struct CdiGenerateArgs {
    #[arg(long, value_name = "DIR", default_value = "/var/run/cdi")]
    pub output_dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// ib_write_bw-compatible RDMA WRITE bandwidth test (loopback RC).
    WriteBw(check::WriteBwArgs),
}

/// Runs one parsed command; returns the exit status.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<i32, CliError> {
    // Install runs before any rund config exists.
    match &cli.command {
        Command::Install(a) => return Ok(install::install(a, cli.config.as_deref(), out)?),
        Command::Uninstall(a) => return Ok(install::uninstall(a, out)?),
        // The shim sends what it needs: no config of its own.
        Command::Helper(h) => {
            helper::run(h, out)?;
            return Ok(0);
        }
        _ => {}
    }
    let cfg = RundConfig::load(cli.config.as_deref())?;
    match cli.command {
        Command::Doctor { json, pid } => {
            let report = doctor::collect(&cfg, pid.unwrap_or(0))?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                doctor::render(&report, out)?;
            }
        }
        Command::Pool(PoolCommand::Status { json }) => pool::status(&cfg.cgroup, json, out)?,
        Command::Pool(PoolCommand::Gc { drain }) => pool::gc(&cfg.cgroup, drain, out)?,
        Command::Pool(PoolCommand::Warm { parent, slots }) => {
            pool::warm(&cfg.cgroup, &parent, slots, out)?
        }
        Command::Devices { json } => devices::list(&cfg.devices, json, out)?,
        Command::Cdi(CdiCommand::Generate(a)) => {
            devices::cdi_generate(&cfg.devices, &a.output_dir, out)?
        }
        Command::Userns(UsernsCommand::List { json }) => userns::list(&cfg, json, out)?,
        Command::Userns(UsernsCommand::Repair) => userns::repair(&cfg, out)?,
        // rund-check prints its own report and errors.
        Command::Check(CheckCommand::WriteBw(a)) => return Ok(check::write_bw(&a)),
        Command::Install(_) | Command::Uninstall(_) | Command::Helper(_) => {
            unreachable!("dispatched above")
        }
    }
    Ok(0)
}

/// `rund`'s main: parse, run, print `rund: <error>` on failure.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help / --version
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            let text = e.render().to_string();
            eprint!("rund: {}", text.strip_prefix("error: ").unwrap_or(&text));
            return 2;
        }
    };
    let stdout = std::io::stdout();
    match run(cli, &mut stdout.lock()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rund: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests;
