//! Markdown for the cgroup pool study: pool on against off at each N.

use std::fmt::Write as _;

use crate::results::{PoolLevel, PoolStudy};
use crate::stats::{ratio, Summary};

fn val(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

/// `on/off`, and the saving `1 − on/off` as a percentage.
fn compare(on: Option<f64>, off: Option<f64>) -> (String, String) {
    match ratio(on, off) {
        Some(r) => (format!("{r:.2}×"), format!("{:.0}%", (1.0 - r) * 100.0)),
        None => ("—".into(), "—".into()),
    }
}

/// Figure name, (on, off), decimals, note.
type Row<'a> = (&'a str, (Option<f64>, Option<f64>), usize, String);

fn level<'a>(study: &'a PoolStudy, variant: &str, n: usize) -> Option<&'a PoolLevel> {
    study
        .levels
        .iter()
        .find(|l| l.variant == variant && l.n == n)
}

pub fn render(study: &PoolStudy) -> String {
    let mut s = format!(
        "pool parent `{}`; \"on\" is warmed to N + low slots before each run (untimed).\n\n",
        study.parent
    );
    if !study.supported {
        let _ = writeln!(s, "not measured: {}", study.note);
        return s;
    }
    s.push_str("| N | figure | pool on | pool off | on/off | saved | note |\n");
    s.push_str("|--:|---|--:|--:|--:|--:|---|\n");
    let mut ns: Vec<usize> = study.levels.iter().map(|l| l.n).collect();
    ns.dedup();
    for n in ns {
        let (Some(on), Some(off)) = (level(study, "on", n), level(study, "off", n)) else {
            continue;
        };
        // Per run: the samples of every round are pooled.
        let per_run = |v: &[f64], runs: usize| {
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / runs.max(1) as f64)
        };
        let sum = |l: &PoolLevel| per_run(&l.cgroup_ms, l.runs);
        let cpu_sum = |l: &PoolLevel| per_run(&l.cgroup_cpu_ms, l.runs);
        // Only when every Create recorded it: a partial sum would read low.
        let made_sum = |l: &PoolLevel| {
            (l.cgroup_made_ms.len() == l.cgroup_ms.len())
                .then(|| per_run(&l.cgroup_made_ms, l.runs))
                .flatten()
        };
        let get = |f: fn(&PoolLevel) -> Option<&Summary>, g: fn(&Summary) -> f64| {
            (f(on).map(g), f(off).map(g))
        };
        let records = format!(
            "records {} / {}, runs {} / {}",
            on.cgroup_ms.len(),
            off.cgroup_ms.len(),
            on.runs,
            off.runs
        );
        let rows: Vec<Row> = vec![
            (
                "cgroup phase median (ms)",
                get(|l| l.cgroup.as_ref(), |s| s.median),
                2,
                records,
            ),
            (
                "cgroup phase p99 (ms)",
                get(|l| l.cgroup.as_ref(), |s| s.p99),
                2,
                String::new(),
            ),
            (
                "cgroup phase, sum over a run's Creates (ms)",
                (sum(on), sum(off)),
                1,
                String::new(),
            ),
            (
                "cgroup step's own wall time, sum over a run (ms)",
                (made_sum(on), made_sum(off)),
                1,
                "the claim or mkdirs themselves, beside the sandbox's launch \
                 (`cgroup_made`); the phase above is what a Create waited for"
                    .into(),
            ),
            (
                "cgroup phase CPU time median (ms)",
                get(|l| l.cgroup_cpu.as_ref(), |s| s.median),
                3,
                "user + kernel time of the thread".into(),
            ),
            (
                "cgroup phase CPU time, sum over a run (ms)",
                (cpu_sum(on), cpu_sum(off)),
                1,
                String::new(),
            ),
            (
                "place phase median (ms, cgroup.procs)",
                get(|l| l.place.as_ref(), |s| s.median),
                2,
                String::new(),
            ),
            (
                "shim Create median (ms)",
                get(|l| l.create.as_ref(), |s| s.median),
                1,
                String::new(),
            ),
            (
                "ctr start per container, median (ms)",
                get(|l| l.start.as_ref(), |s| s.median),
                1,
                format!("failures {} / {}", on.failures, off.failures),
            ),
        ];
        for (name, (a, b), d, note) in rows {
            let (r, saved) = compare(a, b);
            let _ = writeln!(
                s,
                "| {n} | {name} | {} | {} | {r} | {saved} | {note} |",
                val(a, d),
                val(b, d)
            );
        }
        if n > 1 {
            let wall = |l: &PoolLevel| Summary::of(&l.walls_ms).map(|s| s.median / 1e3);
            let (a, b) = (wall(on), wall(off));
            let (r, saved) = compare(a, b);
            let _ = writeln!(
                s,
                "| {n} | wall until all {n} started, median of runs (s) | {} | {} | {r} | {saved} | |",
                val(a, 2),
                val(b, 2)
            );
        }
    }
    for d in &study.dying {
        let _ = writeln!(
            s,
            "| — | dying memcgs added by {} create/delete cycles, pool {} | {} | | | | before {} after {}, failures {}; {} |",
            d.cycles,
            d.variant,
            val(d.added().map(|x| x as f64), 0),
            val(d.before.map(|x| x as f64), 0),
            val(d.after.map(|x| x as f64), 0),
            d.failures,
            d.method
        );
    }
    if !study.note.is_empty() {
        let _ = writeln!(s, "\nnote: {}", study.note);
    }
    for l in &study.levels {
        for e in &l.errors {
            let _ = writeln!(s, "\n- pool {} N={}: {e}", l.variant, l.n);
        }
    }
    for d in &study.dying {
        for e in &d.errors {
            let _ = writeln!(s, "\n- dying cycles, pool {}: {e}", d.variant);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lvl(variant: &str, n: usize, cg: &[f64]) -> PoolLevel {
        PoolLevel {
            variant: variant.into(),
            n,
            cgroup_ms: cg.to_vec(),
            cgroup: Summary::of(cg),
            ..Default::default()
        }
    }

    #[test]
    fn saving_is_computed_from_both_sides_and_missing_is_a_dash() {
        let study = PoolStudy {
            supported: true,
            parent: "/bench".into(),
            levels: vec![lvl("on", 200, &[0.1, 0.1]), lvl("off", 200, &[1.0, 1.0])],
            ..Default::default()
        };
        let out = render(&study);
        let row = out
            .lines()
            .find(|l| l.contains("cgroup phase median"))
            .unwrap();
        assert!(row.contains("| 0.10× | 90% |"), "{row}");
        let row = out.lines().find(|l| l.contains("place phase")).unwrap();
        assert!(row.contains("| — | — | — | — |"), "{row}");
    }

    #[test]
    fn the_steps_own_time_is_summed_per_run_only_when_every_create_has_it() {
        let mut on = lvl("on", 50, &[0.1, 0.1, 0.1, 0.1]);
        on.runs = 2;
        on.cgroup_made_ms = vec![1.0, 2.0, 3.0, 4.0];
        let mut off = lvl("off", 50, &[1.0, 1.0, 1.0, 1.0]);
        off.runs = 2;
        // One Create of the four lacks the figure: no sum, not a low one.
        off.cgroup_made_ms = vec![10.0, 10.0, 10.0];
        let study = PoolStudy {
            supported: true,
            parent: "/bench".into(),
            levels: vec![on, off],
            ..Default::default()
        };
        let out = render(&study);
        let row = out.lines().find(|l| l.contains("own wall time")).unwrap();
        assert!(row.contains("| 5.0 | — | — | — |"), "{row}");
    }

    #[test]
    fn an_unsupported_study_says_why() {
        let study = PoolStudy {
            note: "skipped: no `rund` CLI".into(),
            ..Default::default()
        };
        assert!(render(&study).contains("not measured: skipped: no `rund` CLI"));
    }
}
