//! Spec processing on the Create path: parsing the bundle's config.json and
//! the checks and derivations rund-shim makes from it.
//!
//! Input: the config.json containerd 1.6 writes for `ctr run --rootfs`
//! (captured from a real run, benches/data/ctr-rootfs-config.json).
//!
//! Needs rund-shim's `spec` module: build with `--features spec-bench`.
//! Without it, this bench prints why and measures nothing.
//!
//! TODO(spec): add the remaining Create-path spec edits (device injection via
//! rund_devices::prepare_spec, rlimits, userns mappings) as they land.

#[cfg(feature = "spec-bench")]
mod real {
    use criterion::Criterion;
    use std::hint::black_box;

    const CONFIG: &[u8] = include_bytes!("data/ctr-rootfs-config.json");

    pub fn benches(c: &mut Criterion) {
        let mut g = c.benchmark_group("spec");
        g.bench_function("parse config.json", |b| {
            b.iter(|| rund_shim::spec::parse(black_box(CONFIG)).expect("parse"))
        });
        let spec = rund_shim::spec::parse(CONFIG).expect("parse");
        g.bench_function("check_supported + role + init + namespaces", |b| {
            b.iter(|| {
                let s = black_box(&spec);
                rund_shim::spec::check_supported(s).expect("supported");
                let _ = black_box(rund_shim::spec::role(s));
                let _ = black_box(rund_shim::spec::use_init(s, true, &[]));
                let _ = black_box(rund_shim::spec::namespaces::sandbox_namespaces(s));
            })
        });
        g.bench_function("parse + all checks", |b| {
            b.iter(|| {
                let s = rund_shim::spec::parse(black_box(CONFIG)).expect("parse");
                rund_shim::spec::check_supported(&s).expect("supported");
                let _ = black_box(rund_shim::spec::namespaces::sandbox_namespaces(&s));
            })
        });
        g.finish();
    }
}

fn main() {
    #[cfg(feature = "spec-bench")]
    {
        let mut c = criterion::Criterion::default().configure_from_args();
        real::benches(&mut c);
        c.final_summary();
    }
    #[cfg(not(feature = "spec-bench"))]
    eprintln!(
        "spec bench: skipped; build with `--features spec-bench` (needs rund-shim's spec module)"
    );
}
