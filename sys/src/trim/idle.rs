//! The process's idle trimmer: one thread, parked nearly all its life, that
//! runs [`super::trim_self`] once activity has been quiet for a while.
//!
//! A thread of its own, not a task of the process's runtime: whatever code
//! runs after the unmapping faults its pages back in (64 KiB at a time with
//! the kernel's fault-around), and a parked thread goes straight back to a
//! futex wait, where a runtime would return through its scheduler first.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::Quiet;

struct Trimmer {
    quiet: Quiet,
    /// The ticket of the last activity a trim followed.
    trimmed: AtomicU64,
    after_ms: AtomicU64,
    trims: AtomicU64,
    /// Bumped by every activity: the idle trimmer's futex word.
    wakes: AtomicU32,
    thread: Thread,
}

static TRIMMER: OnceLock<Option<Trimmer>> = OnceLock::new();

/// Held by a trim and by [`no_trim_while`]: a raw clone3 runs no fork
/// handlers, so a child forked while the trimmer held the heap's lock (it
/// reads smaps into the heap) would wait on that lock forever.
static FORKS: Mutex<()> = Mutex::new(());

/// Runs `fork` (a raw clone3 and whatever must precede it) with no trim in
/// progress in this process.
pub fn no_trim_while<T>(fork: impl FnOnce() -> T) -> T {
    let _held = FORKS.lock().unwrap_or_else(|e| e.into_inner());
    fork()
}

/// Records activity: the process trims once none has followed for `after`
/// (the latest caller's `after` counts). Zero turns the trim off.
pub fn activity(after: Duration) {
    let ms = after.as_millis().min(u64::MAX as u128) as u64;
    if ms == 0 {
        return;
    }
    let Some(t) = TRIMMER.get_or_init(start) else {
        return;
    };
    t.after_ms.store(ms, Ordering::SeqCst);
    t.quiet.activity();
    t.wakes.fetch_add(1, Ordering::SeqCst);
    super::raw::futex_wake(&t.wakes);
    // Before its first trim the thread waits in std's park.
    t.thread.unpark();
}

/// Records activity without waking the trimmer: a trim counting down
/// from earlier activity is called off, and the next one waits its full
/// delay from the next [`activity`]. For the start of a request, which may
/// take longer than the delay: its end records activity.
pub fn touch() {
    if let Some(Some(t)) = TRIMMER.get() {
        t.quiet.activity();
    }
}

/// Trims done so far by this process's trimmer.
pub fn trims() -> u64 {
    match TRIMMER.get() {
        Some(Some(t)) => t.trims.load(Ordering::SeqCst),
        _ => 0,
    }
}

/// The trimmer thread; `None` (no trims) if it cannot be made.
fn start() -> Option<Trimmer> {
    // Its stack holds one smaps line parse at a time.
    let handle = std::thread::Builder::new()
        .name("idle-trim".into())
        .stack_size(64 << 10)
        .spawn(|| {
            // Parked until the first activity has stored the trimmer.
            let t = loop {
                match TRIMMER.get() {
                    Some(Some(t)) => break t,
                    Some(None) => return,
                    None => std::thread::park(),
                }
            };
            run(t)
        })
        .ok()?;
    Some(Trimmer {
        quiet: Quiet::default(),
        trimmed: AtomicU64::new(0),
        after_ms: AtomicU64::new(0),
        trims: AtomicU64::new(0),
        wakes: AtomicU32::new(0),
        thread: handle.thread().clone(),
    })
}

fn run(t: &Trimmer) -> ! {
    loop {
        let seen = t.wakes.load(Ordering::SeqCst);
        let ticket = t.quiet.current();
        if ticket == t.trimmed.load(Ordering::SeqCst) {
            // Right after a trim: a raw futex wait, so nothing of libc's
            // text (std's park) is faulted back in.
            super::raw::futex_wait(&t.wakes, seen);
            continue;
        }
        let after = Duration::from_millis(t.after_ms.load(Ordering::SeqCst));
        let deadline = Instant::now() + after;
        // Unparks by later activity only end this wait early: sleep it out.
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            std::thread::park_timeout(left);
        }
        if t.quiet.still(ticket) {
            let _held = FORKS.lock().unwrap_or_else(|e| e.into_inner());
            super::trim_self();
            t.trims.fetch_add(1, Ordering::SeqCst);
            t.trimmed.store(ticket, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_after_quiet_and_again_after_new_activity() {
        let before = trims();
        activity(Duration::from_millis(50));
        // Activity keeps pushing the trim back.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(20));
            activity(Duration::from_millis(50));
        }
        let trimmed_early = trims();
        let deadline = Instant::now() + Duration::from_secs(10);
        while trims() == trimmed_early && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(trims(), before + 1, "one trim after the quiet");
        // Quiet stays quiet: no second trim without activity.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(trims(), before + 1);
        activity(Duration::from_millis(10));
        let deadline = Instant::now() + Duration::from_secs(10);
        while trims() == before + 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(trims(), before + 2);
        // A request that starts (touch) calls off the countdown, and keeps
        // it off while requests keep starting; touches alone wake nothing.
        activity(Duration::from_millis(200));
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            touch();
        }
        assert_eq!(trims(), before + 2, "no trim while requests start");
        let deadline = Instant::now() + Duration::from_secs(10);
        while trims() == before + 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(trims(), before + 3, "the last touch is waited out");
    }
}
