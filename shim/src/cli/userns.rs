//! `rund userns list|repair`: the node's user-namespace id leases.

use std::io::Write;

use super::CliError;
use crate::config::RundConfig;
use crate::userns::LeaseStore;

fn store(cfg: &RundConfig) -> Result<LeaseStore, CliError> {
    LeaseStore::in_state_dir(&cfg.state_dir, &cfg.userns)
        .map_err(|e| CliError::ConfigValue(e.to_string()))
}

pub fn list(cfg: &RundConfig, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let leases = store(cfg)?
        .list()
        .map_err(|e| CliError::ConfigValue(e.to_string()))?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&leases)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<66} {:>10} {:>8} {:>8}",
        "SANDBOX", "HOST BASE", "SIZE", "OWNER"
    )?;
    for l in &leases {
        writeln!(
            out,
            "{:<66} {:>10} {:>8} {:>8}",
            l.sandbox_id, l.lease.host_base, l.lease.size, l.owner.pid
        )?;
    }
    if leases.is_empty() {
        writeln!(out, "(no leases)")?;
    }
    Ok(())
}

pub fn repair(cfg: &RundConfig, out: &mut dyn Write) -> Result<(), CliError> {
    let report = store(cfg)?
        .repair()
        .map_err(|e| CliError::ConfigValue(e.to_string()))?;
    match &report.moved_aside {
        Some(p) => writeln!(out, "corrupt lease file moved aside to {}", p.display())?,
        None => writeln!(out, "lease file is sound")?,
    }
    writeln!(
        out,
        "{} lease(s) recovered from live user namespaces",
        report.recovered.len()
    )?;
    Ok(())
}
