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

/// What the pool does on this node, in one line per fact.
pub fn explain(cfg: &CgroupConfig, v2: bool) -> Vec<String> {
    if v2 {
        return vec![
            "cgroup v2: no pool. The kernel refuses rename on cgroup2, so a pooled cgroup \
             could not be at its container's exact path; each container's cgroup is made \
             with mkdir at its cgroupsPath."
                .into(),
        ];
    }
    if cfg.pool == Switch::Off {
        return vec![
            "pool off: each container's cgroup is made with mkdir and removed with rmdir.".into(),
        ];
    }
    vec![
        format!(
            "batch-filled parents: {} (config pool_parents) and any warmed with `rund pool warm`",
            cfg.pool_parents.join(", ")
        ),
        "any other parent (a Kubernetes pod's cgroup) is never batch-filled: there the cgroup \
         of a container that exited serves the pod's next container (one rename per \
         hierarchy), and nothing is left once the pod's last container is gone"
            .into(),
        "on a cgroup v2 node there is no pool: the kernel refuses rename there".into(),
    ]
}

pub fn status(cfg: &CgroupConfig, as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let cg = cgroups(cfg)?;
    let v2 = cg.hierarchy().is_v2();
    let pools = cg.pool_status()?;
    if as_json {
        let v = json!({
            "pool": cfg.pool,
            "cgroup_v2": v2,
            "in_effect": cg.pool_on(),
            "pool_parents": cfg.pool_parents,
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
    for line in explain(cfg, v2) {
        writeln!(out, "  {line}")?;
    }
    if pools.is_empty() {
        writeln!(out, "no pools yet")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:>7} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
        "PARENT", "SOURCE", "FREE", "CLAIMED", "REFILLS", "CREATED", "RECYCLES", "REMOVED", "GC"
    )?;
    for p in &pools {
        let c = &p.counters;
        writeln!(
            out,
            "{:<24} {:>7} {:>6} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
            format!("/{}", p.parent.display()),
            if p.configured { "config" } else { "warmed" },
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
        "gc: removed {} {what} in {} pool(s), and the state of {} parent(s) that are gone",
        rep.removed, rep.parents, rep.states_removed
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_explained_per_cgroup_version() {
        let cfg = CgroupConfig::default();
        let v2 = explain(&cfg, true).join(" ");
        assert!(
            v2.contains("no pool") && v2.contains("refuses rename"),
            "{v2}"
        );
        let v1 = explain(&cfg, false).join(" ");
        assert!(
            v1.contains("/default") && v1.contains("never batch-filled"),
            "{v1}"
        );
        let off = CgroupConfig {
            pool: Switch::Off,
            ..CgroupConfig::default()
        };
        assert!(explain(&off, false)[0].contains("pool off"));
    }
}
