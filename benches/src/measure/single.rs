//! Single start: `ctr run --rm … /bin/true` (or the same through
//! containerd's client API), end to end.

use std::collections::BTreeMap;

use std::time::Instant;

use super::{alternate, ms, Driver};
use crate::cpu::CpuSplit;
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::SampleSet;
use crate::runtime::Runtime;

/// `iterations` timed runs per runtime, interleaved A, B, A, B …; `tag`
/// keeps container ids unique across phases. Also, per runtime, the mean CPU
/// time of a successful `run --rm` cycle by who spent it (when the bench can
/// measure it); a shim that exits after ctr returned lends its last work to
/// the next sample.
pub fn run(
    env: &BenchEnv,
    driver: Driver,
    rts: &[Runtime],
    iterations: usize,
    tag: &str,
    label: impl Fn(&Runtime) -> String,
    progress: &Progress,
) -> (BTreeMap<String, SampleSet>, BTreeMap<String, CpuSplit>) {
    let mut out: BTreeMap<String, SampleSet> = BTreeMap::new();
    let mut cpu: BTreeMap<String, CpuSplit> = BTreeMap::new();
    for i in 0..iterations {
        for rt in alternate(rts, i) {
            if interrupted() {
                return (out, cpu);
            }
            let id = format!("{}-{}{tag}-{i}", rt.kind.tag(), driver.tag());
            let set = out.entry(label(rt)).or_default();
            let before = env.cpu.as_ref().and_then(|m| m.snap());
            let t0 = Instant::now();
            let ran = match driver {
                Driver::Ctr => env
                    .ctr
                    .run_rm(rt, &env.rootfs, &id, &["/bin/true"])
                    .map(|(_, d)| d)
                    .map_err(|e| short_error(&e, &id)),
                Driver::Api(api) => api
                    .run_rm(rt, &id, &["/bin/true"])
                    .map(|()| t0.elapsed())
                    .map_err(|e| short_error(&e, &id)),
            };
            match ran {
                Ok(d) => {
                    set.ok(ms(d));
                    if let (Some(m), Some(a)) = (&env.cpu, before) {
                        if let Some(s) = m.snap_after().and_then(|b| m.split(&a, &b, 1)) {
                            cpu.entry(label(rt)).or_default().add(&s);
                        }
                    }
                }
                Err(e) => {
                    set.fail(e);
                    // A failed --rm run may leave the container behind.
                    let _ = env.ctr.remove_everything(&id);
                }
            }
            progress.inc(1);
        }
    }
    (out, cpu)
}
