//! `rund pool status`, `rund pool warm` and `rund pool gc`.

use std::io::Write;
use std::sync::Arc;

use rund_cgroup::fs::RealFs;
use rund_cgroup::{CgroupConfig, Cgroups, Hierarchy, Switch};
use serde_json::json;

use crate::cli::error::CliError;

/// `Cgroups::new` starts the refiller thread when the pool is on; an admin
/// command must not make slots behind the user's back, so build it with `with`.
fn cgroups(cfg: &CgroupConfig) -> Result<Cgroups, CliError> {
    Ok(Cgroups::with(
        Hierarchy::detect()?,
        Arc::new(RealFs),
        cfg.clone(),
    ))
}

fn switch(s: Switch) -> &'static str {
    match s {
        Switch::On => "on",
        Switch::Off => "off",
    }
}

pub fn status(cfg: &CgroupConfig, as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let cg = cgroups(cfg)?;
    let pools = cg.pool_status()?;
    if as_json {
        let v = json!({
            "pool": cfg.pool,
            "state_dir": cfg.state_dir,
            "low": cfg.low,
            "high": cfg.high,
            "batch": cfg.batch,
            "pools": pools,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "pool {} (low {}, high {}, batch {}), state in {}",
        switch(cfg.pool),
        cfg.low,
        cfg.high,
        cfg.batch,
        cfg.state_dir.display()
    )?;
    if pools.is_empty() {
        writeln!(out, "no pools yet")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
        "PARENT", "FREE", "CLAIMED", "REFILLS", "CREATED", "RECYCLES", "REMOVED", "GC"
    )?;
    for p in &pools {
        let c = &p.counters;
        writeln!(
            out,
            "{:<24} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
            format!("/{}", p.parent.display()),
            p.free,
            p.claimed,
            c.refills,
            c.slots_created,
            c.recycles,
            c.removed,
            c.gc_removed
        )?;
    }
    Ok(())
}

pub fn gc(cfg: &CgroupConfig, drain: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let rep = cgroups(cfg)?.pool_gc(drain)?;
    let what = if drain {
        "stale and free slots"
    } else {
        "stale slots"
    };
    writeln!(
        out,
        "gc: removed {} {what} in {} pool(s)",
        rep.removed, rep.parents
    )?;
    Ok(())
}

pub fn warm(
    cfg: &CgroupConfig,
    parent: &str,
    slots: usize,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let made = cgroups(cfg)?.pool_warm(parent, slots)?;
    if slots > cfg.high {
        writeln!(
            out,
            "warm: {slots} slots asked, capped at high water {} (raise [cgroup] high)",
            cfg.high
        )?;
    }
    writeln!(out, "warm: made {made} slot(s) under {parent}")?;
    Ok(())
}
