//! The soak, run by `make soak` (not by `make test`: it takes long): 1000 create/exec/delete
//! cycles of containers in one CRI pod, then 200 pods at once through ctr. It prints failures,
//! the latency of the first 100 cycles against the last 100, containerd's and the shim's fds,
//! RSS and threads and the node's dying memcgs over time, every leak counter, and the shim
//! warnings and broken pipes in containerd's log; it fails on any failure or leak.
//! `RUND_SOAK_CYCLES` and `RUND_SOAK_CONCURRENCY` change the sizes.

use rund_tests::faults::probe::{dying_memcgs, shim_of};
use rund_tests::faults::soak::{self, first_last};
use rund_tests::faults::{wait_clean, FaultEnv, GRACE};
use rund_tests::{ContainerdOpts, PodSpec};

fn env_size(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "long: run by make soak"]
fn soak() {
    let n = env_size("RUND_SOAK_CYCLES", 1000);
    let burst = env_size("RUND_SOAK_CONCURRENCY", 200);
    let opts = ContainerdOpts {
        debug: false,
        ..ContainerdOpts::new().cri()
    };
    let Some(env) = FaultEnv::start("soak", opts, "", "") else {
        return;
    };
    let cri = env.ctd.cri_client().expect("CRI client");
    let before = env.leftovers(&[]);
    let dying_before = dying_memcgs();

    let pod = PodSpec::new("soak", &env.ctd.cgroup_parent);
    let pod_id = cri.run_pod_sandbox(&pod, "rund").expect("RunPodSandbox");
    let shim = shim_of(&env.ctd, &pod_id).expect("the pod's shim");
    let cycles = soak::cycles(&env, &cri, &pod, &pod_id, shim, n, (n / 20).max(1));
    cri.remove_pod(&pod_id);
    let (cycle_leaks, _) = wait_clean(&env.ctd, &before, &env.state, GRACE);

    let conc = soak::concurrent(&env, burst);
    let (burst_leaks, _) = wait_clean(&env.ctd, &before, &env.state, GRACE);
    let dying_after = dying_memcgs();
    let log = std::fs::read_to_string(&env.ctd.log).unwrap_or_default();
    let broken_pipes = log.matches("broken pipe").count();
    let shim_warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN rund_shim") || l.contains(" ERROR rund_shim"))
        .collect();
    let pools = env.pools();

    println!("\n=== rund soak: {n} cycles in one pod, then {burst} pods at once ===");
    println!(
        "cycles: {} ok, {} failed",
        cycles.latencies_ms.len(),
        cycles.failures.len()
    );
    println!("latency: {}", first_last(&cycles.latencies_ms, 100));
    println!("\n{}", soak::samples_table(&cycles.samples));
    println!(
        "concurrent: {} ok, {} failed in {:.1} s; per pod mean {:.0} ms, median {:.0} ms",
        conc.latencies_ms.len(),
        conc.failures.len(),
        conc.wall.as_secs_f64(),
        soak::mean(&conc.latencies_ms),
        soak::median(&conc.latencies_ms)
    );
    println!("dying memcgs: {dying_before:?} before, {dying_after:?} after");
    for p in &pools {
        println!("pool: {p}");
    }
    println!(
        "leaks after the cycles: {}",
        cycle_leaks.as_deref().unwrap_or("none")
    );
    println!(
        "leaks after the concurrent pods: {}",
        burst_leaks.as_deref().unwrap_or("none")
    );
    println!(
        "containerd log: {broken_pipes} broken pipes, {} shim warnings/errors",
        shim_warnings.len()
    );
    for w in shim_warnings.iter().take(10) {
        println!("  {w}");
    }
    for f in cycles.failures.iter().chain(&conc.failures).take(20) {
        println!("failure: {f}");
    }

    assert!(
        cycles.failures.is_empty() && conc.failures.is_empty(),
        "failures (see above)"
    );
    assert!(
        cycle_leaks.is_none() && burst_leaks.is_none(),
        "leaks (see above)"
    );
    for p in &pools {
        assert_eq!(p["claimed"], 0, "pool slots still claimed: {p}");
    }
    assert_eq!(broken_pipes, 0, "containerd saw a shim close uncleanly");
}
