//! `rund devices` and `rund cdi generate`.

use std::io::Write;
use std::path::Path;

use rund_devices::DeviceConfig;

use crate::cli::error::CliError;

mod render;
pub use render::{devices_json, devices_table};

#[cfg(test)]
mod tests;

pub fn list(cfg: &DeviceConfig, as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    if as_json {
        let v = devices_json(cfg);
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        write!(out, "{}", devices_table(cfg))?;
    }
    Ok(())
}

pub fn cdi_generate(cfg: &DeviceConfig, dir: &Path, out: &mut dyn Write) -> Result<(), CliError> {
    let rep = rund_devices::cdi_generate(cfg, dir)?;
    for p in &rep.written {
        writeln!(out, "wrote {}", p.display())?;
    }
    for p in &rep.removed {
        writeln!(out, "removed stale {}", p.display())?;
    }
    for n in &rep.notes {
        writeln!(out, "note: {n}")?;
    }
    if rep.written.is_empty() {
        writeln!(out, "no CDI spec written to {}", dir.display())?;
    }
    Ok(())
}
