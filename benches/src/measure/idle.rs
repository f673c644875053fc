//! Memory of idle pods: a few sleeping containers per runtime, started one
//! by one (alternating), listed, then left alone so start-up buffers and
//! worker threads can go, then weighed as in the density measure. Then
//! their shims' CPU time when polled (`polls.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::{alternate, density, polls};
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::procfs;
use crate::progress::{interrupted, Progress};
use crate::results::{note_error, IdleSet};
use crate::runtime::Runtime;

/// How long the pods sit idle before they are weighed.
pub const SETTLE: Duration = Duration::from_secs(3);

pub fn run(
    env: &BenchEnv,
    rts: &[Runtime],
    pods: usize,
    progress: &Progress,
) -> BTreeMap<String, IdleSet> {
    let mut out: BTreeMap<String, IdleSet> = BTreeMap::new();
    let mut ids: Vec<(String, String)> = Vec::new();
    progress.phase("idle pods: start");
    for i in 0..pods {
        for rt in alternate(rts, i) {
            if interrupted() {
                break;
            }
            let label = rt.kind.label().to_string();
            let set = out.entry(label.clone()).or_default();
            set.pods += 1;
            let id = format!("{}-idle-{i}", rt.kind.tag());
            match env
                .ctr
                .run_detached(rt, &env.rootfs, &id, &["/bin/sleep", "100000"])
            {
                Ok(()) => ids.push((label, id)),
                Err(e) => {
                    set.failures += 1;
                    note_error(&mut set.errors, short_error(&e, &id));
                    let _ = env.ctr.remove_everything(&id);
                }
            }
            progress.inc(1);
        }
    }
    // Listed before the settle: `ctr task ls` asks every shim for its
    // state, which would run (and map back) the shims' RPC code just
    // before they are weighed.
    let tasks = env.ctr.tasks().unwrap_or_default();
    progress.phase("idle pods: settle");
    std::thread::sleep(SETTLE);
    let mut shims: HashMap<String, BTreeSet<u32>> = HashMap::new();
    for (label, set) in out.iter_mut() {
        set.settle_ms = SETTLE.as_millis() as u64;
        let pids: Vec<u32> = tasks
            .iter()
            .filter(|t| {
                t.status == "RUNNING" && ids.iter().any(|(l, id)| l == label && *id == t.id)
            })
            .map(|t| t.pid)
            .collect();
        let missing = ids.iter().filter(|(l, _)| l == label).count() - pids.len();
        if missing > 0 {
            set.failures += missing;
            note_error(
                &mut set.errors,
                "a started pod was not RUNNING when listed".into(),
            );
        }
        if !pids.is_empty() {
            set.density = Some(density::measure(&pids, &env.workload_binary()));
        }
        shims.insert(
            label.clone(),
            pids.iter().filter_map(|&p| procfs::shim_of(p)).collect(),
        );
    }
    progress.phase("idle pods: polls");
    for (label, costs) in polls::run(&env.ctr, &shims) {
        if let Some(set) = out.get_mut(&label) {
            set.polls = costs;
        }
    }
    progress.phase("idle pods: teardown");
    for (_, id) in &ids {
        let _ = env.ctr.remove_everything(id);
    }
    out
}
