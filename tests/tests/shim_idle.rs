//! An idle shim and agent give back their start-up pages (`[idle] trim_after_ms`): the clean
//! file pages they mapped at start are unmapped once requests have been quiet that long (and
//! their main thread's dead stack let go), and the pod keeps working (exec, kill, delete) with the pages faulted back in, and given back
//! again once quiet. What polls alone (State) map back stays until `trim_after_polls_ms`.
//! With 0, nothing is unmapped.
//!
//! Needs root and rund's binaries; skipped with a message otherwise.

use std::path::Path;
use std::time::{Duration, Instant};

use rund_tests::shim::memory::mapped_kb;
use rund_tests::shim::residue::agents_of;
use rund_tests::shim::{unique_id, Bundle, Direct};
use rund_tests::RundBins;

fn setup(test: &str) -> Option<RundBins> {
    rund_tests::shim::direct_setup(test)
}

fn rootfs() -> &'static Path {
    rund_tests::shim::busybox_rootfs()
}

/// kB resident in `pid`'s main thread stack.
fn stack_kb(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut lines = smaps.lines().skip_while(|l| !l.ends_with("[stack]"));
    lines
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A started `sleep` pod whose shim trims after `trim_ms` (`polls_ms` after polls alone);
/// returns it with the shim's and the agent's mapped kB right after Start.
async fn started(bins: &RundBins, trim_ms: u64, polls_ms: u64) -> (Direct, u32, u64, u64) {
    let bundle = Bundle::new(&unique_id("idle")).unwrap();
    bundle
        .write_config(&bundle.spec(rootfs(), &["sleep", "100000"]))
        .unwrap();
    let config = format!("[idle]\ntrim_after_ms = {trim_ms}\ntrim_after_polls_ms = {polls_ms}\n");
    let d = Direct::start_with(bins, bundle, &config).await.unwrap();
    d.create().await.unwrap();
    d.start_process("").await.unwrap();
    let agent = *agents_of(d.shim.pid).first().expect("the pod's agent");
    let (shim_kb, agent_kb) = (mapped_kb(d.shim.pid), mapped_kb(agent));
    (d, agent, shim_kb, agent_kb)
}

/// The delay after polls alone in the trimming test: well past `trim_after_ms` (1 s).
const POLLS_MS: u64 = 6000;

/// `pid`'s mapped kB once `done` holds of it, or at `within`.
async fn mapped_kb_once(pid: u32, within: Duration, done: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + within;
    let mut now = mapped_kb(pid);
    while Instant::now() < deadline && !done(now) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = mapped_kb(pid);
    }
    now
}

async fn stop(d: Direct) {
    d.kill_process("", libc::SIGKILL as u32).await.unwrap();
    assert_eq!(d.wait_process("").await.unwrap().exit_status, 137);
    d.delete_process("").await.unwrap();
    let ended = d.finish().await;
    assert!(ended.by_itself, "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_shim_and_agent_unmap_start_pages_and_keep_working() {
    let Some(bins) = setup("idle_shim_and_agent_unmap_start_pages") else {
        return;
    };
    let (d, agent, shim_kb, agent_kb) = started(&bins, 1000, POLLS_MS).await;
    let shim = d.shim.pid;
    let stacks = (stack_kb(shim), stack_kb(agent));
    eprintln!("after Start: shim {shim_kb} kB, agent {agent_kb} kB mapped; stacks {stacks:?} kB");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut shim_now, mut agent_now) = (shim_kb, agent_kb);
    while Instant::now() < deadline && (shim_now * 2 > shim_kb || agent_now * 2 > agent_kb) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (shim_now, agent_now) = (mapped_kb(shim), mapped_kb(agent));
    }
    eprintln!("idle: shim {shim_now} kB, agent {agent_now} kB mapped");
    // With the code, the runtime threads let go of their dead stack (start-up's and the
    // requests'): what stays is the frames of their wait.
    let idle_stacks = (stack_kb(shim), stack_kb(agent));
    eprintln!("idle stacks: {idle_stacks:?} kB (after Start: {stacks:?})");
    assert!(
        idle_stacks.0 * 2 <= stacks.0 && idle_stacks.1 * 2 <= stacks.1,
        "the idle shim and agent kept their dead stack: {idle_stacks:?} kB, {stacks:?} after Start"
    );
    // What runs after the unmapping goes through no libc code (raw syscalls, and a raw
    // futex wait after): the agent, which nothing wakes, has none of libc's text mapped.
    let libc_kb = |pid: u32| -> u64 {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
        rund_sys::trim::trimmable(&smaps)
            .iter()
            .filter(|m| m.path.contains("/libc.so"))
            .map(|m| m.rss_kb)
            .sum()
    };
    eprintln!(
        "libc text mapped: shim {} kB, agent {} kB",
        libc_kb(shim),
        libc_kb(agent)
    );
    assert_eq!(libc_kb(agent), 0, "the idle agent mapped libc's text back");
    // The pod works on: code comes back from the page cache.
    assert_eq!(d.exec_to_end("e1", &["true"]).await.unwrap(), 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Polls alone (State): what they map back is what the next poll runs, so it stays past
    // `trim_after_ms` and goes after `trim_after_polls_ms`.
    let quiet = mapped_kb(shim);
    for _ in 0..20 {
        d.state("").await.unwrap();
    }
    let polled = mapped_kb(shim);
    eprintln!("quiet: shim {quiet} kB mapped; after 20 State: {polled} kB");
    assert!(polled > quiet, "State ran no code that had been unmapped");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let kept = mapped_kb(shim);
    eprintln!("2.5 s after the polls: {kept} kB");
    assert!(
        kept * 10 >= polled * 9,
        "polls alone trimmed after trim_after_ms: {polled} -> {kept} kB"
    );
    // At least half of what the polls mapped back is given back.
    let given_back = |now: u64| polled.saturating_sub(now) * 2 >= polled - quiet;
    let now = mapped_kb_once(shim, Duration::from_secs(20), given_back).await;
    assert!(
        given_back(now),
        "the shim keeps {now} kB of the {polled} kB after the polls"
    );
    // A request that changes something, then polls: the short delay holds.
    let quiet = now;
    assert_eq!(d.exec_to_end("e2", &["true"]).await.unwrap(), 0);
    for _ in 0..5 {
        d.state("").await.unwrap();
    }
    let worked = mapped_kb(shim);
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let now = mapped_kb(shim);
    eprintln!("exec and 5 State: {quiet} -> {worked} kB; 3 s later {now} kB");
    assert!(
        worked > quiet && worked.saturating_sub(now) * 2 >= worked - quiet,
        "polls after an exec stretched the trim delay: {quiet} -> {worked} -> {now} kB"
    );
    eprintln!("quiet again: shim {now} kB mapped");
    stop(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_after_0_never_unmaps() {
    let Some(bins) = setup("trim_after_0_never_unmaps") else {
        return;
    };
    let (d, agent, shim_kb, agent_kb) = started(&bins, 0, 0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (shim_now, agent_now) = (mapped_kb(d.shim.pid), mapped_kb(agent));
    eprintln!("shim {shim_kb} -> {shim_now} kB, agent {agent_kb} -> {agent_now} kB mapped");
    assert!(shim_now * 2 > shim_kb, "shim {shim_kb} -> {shim_now} kB");
    assert!(
        agent_now * 2 > agent_kb,
        "agent {agent_kb} -> {agent_now} kB"
    );
    stop(d).await;
}

/// The blocking pool's threads that a pod's start ran on, by their name.
fn blocking_threads(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("tokio-"))
        })
        .count()
}

/// A thread that exits runs code (its own and the runtime's teardown): if the blocking pool's
/// threads outlived the trim, their exit would map about half a MiB back into an idle shim
/// until its next request. They exit first, and an exit pushes a trim back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_thread_exit_maps_code_back_after_the_trim() {
    let Some(bins) = setup("no_thread_exit_maps_code_back_after_the_trim") else {
        return;
    };
    let (d, _agent, shim_kb, _) = started(&bins, 200, POLLS_MS).await;
    let shim = d.shim.pid;
    let trimmed = mapped_kb_once(shim, Duration::from_secs(20), |now| now * 2 <= shim_kb).await;
    assert!(trimmed * 2 <= shim_kb, "no trim: {shim_kb} -> {trimmed} kB");
    // Idle from here on: nothing that runs may map the shim's code back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = mapped_kb(shim);
    eprintln!("after Start {shim_kb} kB, trimmed {trimmed} kB, 1.5 s later {later} kB");
    assert_eq!(blocking_threads(shim), 0, "the blocking pool kept threads");
    assert!(
        later <= trimmed + 64,
        "code came back into the idle shim: {trimmed} -> {later} kB"
    );
    stop(d).await;
}
