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
use std::time::Duration;

use super::Quiet;

struct Trimmer {
    quiet: Quiet,
    /// The ticket of the last activity a trim followed.
    trimmed: AtomicU64,
    /// The ticket of the last [`activity`] (not a [`poll`]).
    worked: AtomicU64,
    after_ms: AtomicU64,
    /// The delay when only polls came since the last trim.
    poll_after_ms: AtomicU64,
    trims: AtomicU64,
    /// Bumped by every wake: the idle trimmer's futex word.
    wakes: AtomicU32,
    /// The delay (ms) the trimmer is counting down; 0: it waits for a wake.
    counting_ms: AtomicU64,
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

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// Records activity: the process trims once none has followed for `after`
/// (the latest caller's `after` counts). Zero turns the trim off.
pub fn activity(after: Duration) {
    let ms = millis(after);
    if ms == 0 {
        return;
    }
    let Some(t) = TRIMMER.get_or_init(start) else {
        return;
    };
    t.after_ms.store(ms, Ordering::SeqCst);
    t.worked.fetch_max(t.quiet.activity(), Ordering::SeqCst);
    wake(t, ms);
}

/// Records a poll: a request that a caller repeats while the process is
/// idle (a shim's State or Stats). The code it ran is what the next poll
/// runs again, so when only polls came since the last trim, the trim waits
/// `after` instead of [`activity`]'s delay. Zero: polls alone never trim.
/// Either way a poll pushes back a trim that is counting down.
pub fn poll(after: Duration) {
    let ms = millis(after);
    let Some(Some(t)) = TRIMMER.get() else {
        // Nothing to trim before the first activity.
        return;
    };
    t.poll_after_ms.store(ms, Ordering::SeqCst);
    if ms == 0 {
        return touch();
    }
    t.quiet.activity();
    wake(t, ms);
}

/// Wakes the trimmer for an activity (already recorded) whose delay is
/// `delay_ms`, unless it is counting down a delay no longer than that: it
/// then sees the activity when its wait ends, and waits on from it. One
/// wake per quiet spell, not one per request.
fn wake(t: &Trimmer, delay_ms: u64) {
    let counting = t.counting_ms.load(Ordering::SeqCst);
    if counting != 0 && counting <= delay_ms {
        return;
    }
    t.wakes.fetch_add(1, Ordering::SeqCst);
    super::raw::futex_wake(&t.wakes);
    // Counting down, or before its first trim, the thread is in std's park.
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

/// How long a trim waits for the main thread to let go of its dead stack
/// (it does so at its next park anyway).
const LET_GO_LIMIT: Duration = Duration::from_millis(10);

/// A trim due this soon is pushed back by a thread's exit, which might
/// otherwise run its libc code after the trim.
const EXIT_MARGIN: Duration = Duration::from_millis(20);

/// Called by a thread about to exit (a runtime's `on_thread_stop`): its exit
/// runs libc code that a trim unmaps. A trim counting down comes after the
/// exit (pushed back if it is due within [`EXIT_MARGIN`]); after a trim, the
/// code the exit maps back is trimmed again once [`activity`]'s delay has
/// passed. Either way the exit does not delay a trim by its full delay.
pub fn thread_exit() {
    let Some(Some(t)) = TRIMMER.get() else {
        return;
    };
    let counting = t.counting_ms.load(Ordering::SeqCst);
    let left = match counting {
        0 => None,
        ms => remaining(Duration::from_millis(ms), t.quiet.since_last()),
    };
    match left {
        // The trim comes after this exit.
        Some(left) if left >= EXIT_MARGIN => {}
        Some(_) => touch(),
        // A trim under way, or done: another once the delay has passed.
        None if counting != 0 || t.quiet.current() == t.trimmed.load(Ordering::SeqCst) => {
            let ms = t.after_ms.load(Ordering::SeqCst);
            if ms > 0 {
                t.worked.fetch_max(t.quiet.activity(), Ordering::SeqCst);
                wake(t, ms);
            }
        }
        None => {}
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
        worked: AtomicU64::new(0),
        after_ms: AtomicU64::new(0),
        poll_after_ms: AtomicU64::new(0),
        trims: AtomicU64::new(0),
        wakes: AtomicU32::new(0),
        counting_ms: AtomicU64::new(0),
        thread: handle.thread().clone(),
    })
}

fn run(t: &Trimmer) -> ! {
    loop {
        // Not counting before the ticket is read: an activity after the
        // read sees 0 and wakes this thread (see `wake`).
        t.counting_ms.store(0, Ordering::SeqCst);
        let seen = t.wakes.load(Ordering::SeqCst);
        let ticket = t.quiet.current();
        let trimmed = ticket == t.trimmed.load(Ordering::SeqCst);
        let Some(mut after) = delay(t).filter(|_| !trimmed) else {
            // Right after a trim, or polls alone with no delay of their own:
            // a raw futex wait, so nothing of libc's text (std's park) is
            // faulted back in.
            super::raw::futex_wait(&t.wakes, seen);
            continue;
        };
        // Until the delay has passed since the latest activity: a later
        // one moves the end (so a poll right after a Start does not make
        // the trim wait the delay twice), and an activity after polls
        // shortens the delay.
        t.counting_ms.store(millis(after), Ordering::SeqCst);
        while let Some(left) = remaining(after, t.quiet.since_last()) {
            std::thread::park_timeout(left);
            after = delay(t).unwrap_or(after);
            t.counting_ms.store(millis(after), Ordering::SeqCst);
        }
        if t.quiet.still(ticket) {
            // Before the code goes: the runtime's wake-up runs some of it.
            super::stack::let_go(LET_GO_LIMIT);
            let _held = FORKS.lock().unwrap_or_else(|e| e.into_inner());
            super::trim_self();
            t.trims.fetch_add(1, Ordering::SeqCst);
            t.trimmed.store(ticket, Ordering::SeqCst);
        }
    }
}

/// What is left of `after` once it has been quiet for `quiet_for`; `None`:
/// time to trim.
fn remaining(after: Duration, quiet_for: Duration) -> Option<Duration> {
    after.checked_sub(quiet_for).filter(|left| !left.is_zero())
}

/// [`activity`]'s delay if one came since the last trim, else the polls'
/// (`None`: polls alone do not trim).
fn delay(t: &Trimmer) -> Option<Duration> {
    let polls_only = t.worked.load(Ordering::SeqCst) <= t.trimmed.load(Ordering::SeqCst);
    let ms = if polls_only {
        &t.poll_after_ms
    } else {
        &t.after_ms
    };
    Some(ms.load(Ordering::SeqCst))
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_delay_counts_from_the_latest_activity() {
        let ms = Duration::from_millis;
        // Quiet for 10 ms of a 250 ms delay: 240 ms are left, counted from
        // the latest activity, not from where the trimmer's wait began.
        assert_eq!(remaining(ms(250), ms(10)), Some(ms(240)));
        assert_eq!(remaining(ms(250), ms(250)), None);
        assert_eq!(remaining(ms(250), ms(900)), None);
        let q = Quiet::default();
        q.activity();
        std::thread::sleep(ms(30));
        let quiet_for = q.since_last();
        assert!(quiet_for >= ms(30), "{quiet_for:?}");
        q.activity();
        assert!(
            q.since_last() < quiet_for,
            "activity did not reset the quiet"
        );
    }

    /// The tests share the process's one trimmer.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn trims_reach(n: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while trims() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        trims() == n
    }

    #[test]
    fn trims_once_after_quiet_and_again_after_new_activity() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

    fn the_trimmer() -> &'static Trimmer {
        match TRIMMER.get() {
            Some(Some(t)) => t,
            _ => panic!("no trimmer"),
        }
    }

    #[test]
    fn requests_while_it_counts_down_do_not_wake_the_trimmer() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let before = trims();
        // Long enough that only a wake can bring the trim within the test.
        let long = Duration::from_secs(60);
        activity(long);
        let t = the_trimmer();
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.counting_ms.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            t.counting_ms.load(Ordering::SeqCst),
            60_000,
            "not counting down"
        );
        let wakes = t.wakes.load(Ordering::SeqCst);
        for _ in 0..50 {
            activity(long);
        }
        assert_eq!(t.wakes.load(Ordering::SeqCst), wakes, "a request woke it");
        // A shorter delay than the one counted down wakes it, and the trim
        // follows that delay (within trims_reach's 10 s, not the 60 s).
        activity(Duration::from_millis(20));
        assert!(
            t.wakes.load(Ordering::SeqCst) > wakes,
            "no wake for a shorter delay"
        );
        assert!(trims_reach(before + 1), "the shorter delay was not taken");
    }

    #[test]
    fn a_thread_exit_before_a_trim_keeps_it_and_one_after_brings_another() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let before = trims();
        activity(Duration::from_secs(60));
        let t = the_trimmer();
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.counting_ms.load(Ordering::SeqCst) != 60_000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ticket = t.quiet.current();
        thread_exit();
        assert_eq!(
            t.quiet.current(),
            ticket,
            "an early exit pushed the trim back"
        );
        activity(Duration::from_millis(20));
        assert!(trims_reach(before + 1));
        // Trimmed and waiting: an exit now brings a second trim.
        thread_exit();
        assert!(trims_reach(before + 2), "no trim after the exit");
    }

    #[test]
    fn polls_alone_wait_their_own_delay() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let short = Duration::from_millis(20);
        activity(short);
        assert!(trims_reach(trims() + 1), "no trim after activity");
        let base = trims();
        // Only polls since that trim: the activity's delay passes, theirs does not.
        for _ in 0..3 {
            poll(Duration::from_millis(800));
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            trims(),
            base,
            "polls alone trimmed after the activity's delay"
        );
        assert!(trims_reach(base + 1), "polls alone never trimmed");
        // Activity, then polls: the activity's delay holds (not the hour).
        activity(short);
        poll(Duration::from_secs(3600));
        assert!(
            trims_reach(base + 2),
            "polls stretched the activity's delay"
        );
        // A zero delay: polls alone never trim, but push back a countdown.
        for _ in 0..3 {
            poll(Duration::ZERO);
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(trims(), base + 2, "polls with no delay trimmed");
        activity(short);
        poll(Duration::ZERO);
        assert!(
            trims_reach(base + 3),
            "a poll called off the activity's trim"
        );
    }
}
