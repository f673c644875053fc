//! Stop latency of a shell PID 1: `sh -c 'sleep 1000 & wait'`, sent TERM.
//! The figure is TERM to the task's exit event, capped; at the cap the task
//! is KILLed and the sample is marked capped (runc-v2 never exits on TERM).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::events::Events;
use super::{alternate, ms};
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::{note_error, StopSet};
use crate::runtime::Runtime;

const WORKLOAD: &[&str] = &["/bin/sh", "-c", "sleep 1000 & wait"];
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(
    env: &BenchEnv,
    rts: &[Runtime],
    samples: usize,
    cap: Duration,
    progress: &Progress,
) -> BTreeMap<String, StopSet> {
    let mut out: BTreeMap<String, StopSet> = BTreeMap::new();
    let events = match Events::subscribe(&env.ctr) {
        Ok(e) => e,
        Err(e) => {
            for rt in rts {
                let set = out.entry(rt.kind.label().to_string()).or_default();
                set.failures += samples as u32;
                note_error(&mut set.errors, format!("cannot run `ctr events`: {e}"));
            }
            return out;
        }
    };
    // Let the subscription reach containerd before the first container.
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..samples {
        for rt in alternate(rts, i) {
            if interrupted() {
                return out;
            }
            progress.phase(format!("{} stop latency", rt.kind.label()));
            let set = out.entry(rt.kind.label().to_string()).or_default();
            let id = format!("{}-stop-{i}", rt.kind.tag());
            if let Err(e) = one(env, &events, rt, &id, cap, set) {
                set.failures += 1;
                note_error(&mut set.errors, e);
            }
            let _ = env.ctr.remove_everything(&id);
            progress.inc(1);
        }
    }
    out
}

fn one(
    env: &BenchEnv,
    events: &Events,
    rt: &Runtime,
    id: &str,
    cap: Duration,
    set: &mut StopSet,
) -> Result<(), String> {
    env.ctr
        .run_detached(rt, &env.rootfs, id, WORKLOAD)
        .map_err(|e| short_error(&e, id))?;
    // TERM must find the shell already waiting on its child.
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        if env.ctr.task_pids(id).map(|p| p.len() >= 2).unwrap_or(false) {
            break;
        }
        if Instant::now() >= deadline {
            return Err("the workload never forked its sleep".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    env.ctr
        .kill(id, "SIGTERM")
        .map_err(|e| short_error(&e, id))?;
    if let Some((ev, t)) = events.wait_for(id, "exit", t0 + cap) {
        set.samples_ms.push(ms(t - t0));
        set.capped.push(false);
        set.exit_status.push(ev.exit_status);
    } else {
        env.ctr
            .kill(id, "SIGKILL")
            .map_err(|e| short_error(&e, id))?;
        let ev = events.wait_for(id, "exit", Instant::now() + SETUP_TIMEOUT);
        set.samples_ms.push(ms(cap));
        set.capped.push(true);
        set.exit_status.push(ev.and_then(|(e, _)| e.exit_status));
    }
    set.summary = crate::stats::Summary::of(&set.samples_ms);
    Ok(())
}
