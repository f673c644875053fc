//! Single start: `ctr run --rm … /bin/true`, end to end.

use std::collections::BTreeMap;

use super::{alternate, ms};
use crate::ctr::short_error;
use crate::env::BenchEnv;
use crate::progress::{interrupted, Progress};
use crate::results::SampleSet;
use crate::runtime::Runtime;

/// `iterations` timed runs per runtime, interleaved A, B, A, B …
/// `tag` keeps container ids unique across phases.
pub fn run(
    env: &BenchEnv,
    rts: &[Runtime],
    iterations: usize,
    tag: &str,
    label: impl Fn(&Runtime) -> String,
    progress: &Progress,
) -> BTreeMap<String, SampleSet> {
    let mut out: BTreeMap<String, SampleSet> = BTreeMap::new();
    for i in 0..iterations {
        for rt in alternate(rts, i) {
            if interrupted() {
                return out;
            }
            let id = format!("{}-{tag}-{i}", rt.kind.tag());
            let set = out.entry(label(rt)).or_default();
            match env.ctr.run_rm(rt, &env.rootfs, &id, &["/bin/true"]) {
                Ok((_, d)) => set.ok(ms(d)),
                Err(e) => {
                    set.fail(short_error(&e, &id));
                    // A failed --rm run may leave the container behind.
                    let _ = env.ctr.remove_everything(&id);
                }
            }
            progress.inc(1);
        }
    }
    out
}
