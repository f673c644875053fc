//! The dead part of the main thread's stack: pages below the current frame
//! hold only frames of calls that returned (start-up, the last request). A
//! runtime on the main thread lets them go as it parks, once the process
//! has gone quiet: the idle trimmer asks for it ([`let_go`]) right before
//! it unmaps the process's code. Not at every park: a busy thread would
//! fault the same pages back in at each wake-up, and each madvise that
//! finds them costs a TLB flush (about 0.5 ms of a pod's start in the shim,
//! 40 wake-ups).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The main thread's `[stack]` mapping, `[LOW, HIGH)` (HIGH 0: not read yet;
/// LOW = HIGH: none).
static LOW: AtomicUsize = AtomicUsize::new(0);
static HIGH: AtomicUsize = AtomicUsize::new(0);
static MAIN: Handshake = Handshake::new();
/// Wakes the main thread's runtime (registered with [`wake_with`]).
static WAKE: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Between the idle trimmer, which asks for the stack to go, and the
/// thread that runs on it, which lets it go as it parks.
struct Handshake {
    /// The thread ran since it last let go.
    dirty: AtomicBool,
    /// Asked to let go at its next park.
    due: AtomicBool,
    /// Bumped by each let-go: the asker's futex word.
    done: AtomicU32,
}

impl Handshake {
    const fn new() -> Handshake {
        Handshake {
            dirty: AtomicBool::new(true),
            due: AtomicBool::new(false),
            done: AtomicU32::new(0),
        }
    }

    /// At a park: `None` when not asked (nothing to do, no ack), else
    /// whether the thread ran since it last let go (then it lets go now).
    fn parking(&self) -> Option<bool> {
        if !self.due.load(Ordering::SeqCst) {
            return None;
        }
        self.due.store(false, Ordering::SeqCst);
        Some(self.dirty.swap(false, Ordering::SeqCst))
    }

    /// After a park's let-go (or a park that had nothing to let go).
    fn ack(&self) {
        self.done.fetch_add(1, Ordering::SeqCst);
        super::raw::futex_wake(&self.done);
    }

    /// Asks for a let-go and wakes the thread with `wake`; waits up to
    /// `limit` for it. False when nothing ran since the last one.
    fn ask(&self, wake: &dyn Fn(), limit: Duration) -> bool {
        if !self.dirty.load(Ordering::SeqCst) {
            return false;
        }
        let seen = self.done.load(Ordering::SeqCst);
        self.due.store(true, Ordering::SeqCst);
        wake();
        // A busy thread lets go at its next park, after the limit.
        super::raw::futex_wait_for(&self.done, seen, limit);
        true
    }
}

/// Registers how to wake the runtime that runs on the main thread (its
/// handle spawning an empty task): a let-go happens only at a park.
pub fn wake_with(wake: impl Fn() + Send + Sync + 'static) {
    let _ = WAKE.set(Box::new(wake));
}

/// For the idle trimmer, before it unmaps code: the main thread's runtime
/// lets go of its dead stack (waking it for that), within `limit`, and is
/// back in its runtime's wait, so the code of its way back there is not
/// run after the unmapping. Not inlined: the trimmer's loop, which runs
/// after the unmapping, keeps to the pages it had.
///
/// Nothing here allocates outside the fork lock (`idle::FORKS`): a raw
/// clone3 elsewhere in the process must not find this thread inside malloc,
/// or the child would wait for the heap's lock forever. The path is built
/// on the stack, and the wake (which spawns a task) runs under the lock.
#[inline(never)]
pub(super) fn let_go(limit: Duration) {
    let Some(wake) = WAKE.get() else {
        return;
    };
    let end = std::time::Instant::now() + limit;
    let mut buf = [0u8; 48];
    let Some(syscall) = task_syscall_path(&mut buf, std::process::id()) else {
        return;
    };
    let wake_locked = || super::idle::no_trim_while(wake);
    if MAIN.ask(&wake_locked, limit) {
        while !waiting(syscall) && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// `/proc/self/task/<tid>/syscall`, written into `buf`.
fn task_syscall_path(buf: &mut [u8; 48], tid: u32) -> Option<&str> {
    use std::io::Write;
    let mut w: &mut [u8] = &mut buf[..];
    write!(w, "/proc/self/task/{tid}/syscall").ok()?;
    let len = 48 - w.len();
    std::str::from_utf8(&buf[..len]).ok()
}

/// The thread whose `syscall` file this is waits in a syscall other than
/// a futex (a lock, maybe malloc's, on its way back to its wait). Reads
/// into the stack: a trimmer on the heap would take malloc's lock.
fn waiting(syscall: &str) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 24];
    let Ok(n) = std::fs::File::open(syscall).and_then(|mut f| f.read(&mut buf)) else {
        return false;
    };
    let first = buf[..n].split(|&b| b == b' ').next().unwrap_or_default();
    match std::str::from_utf8(first)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
    {
        Some(nr) => nr >= 0 && nr != libc::SYS_futex,
        // "running", or -1 (blocked, not in a syscall).
        None => false,
    }
}

/// For the runtime's unpark hook: the thread runs again.
pub fn unparked() {
    MAIN.dirty.store(true, Ordering::Relaxed);
}

/// For the runtime's park hook: when the idle trimmer asked and this thread
/// runs on the `[stack]` mapping (the main thread), lets go of its pages
/// below this frame. On any other thread's stack it does nothing.
#[inline(never)]
pub fn parking() {
    let Some(dirty) = MAIN.parking() else {
        return;
    };
    if dirty {
        if HIGH.load(Ordering::Relaxed) == 0 {
            let (low, high) = stack_range().unwrap_or((1, 1));
            LOW.store(low, Ordering::Relaxed);
            HIGH.store(high, Ordering::Relaxed);
        }
        let here = 0u8;
        let sp = std::hint::black_box(&here) as *const u8 as usize;
        let (low, high) = (LOW.load(Ordering::Relaxed), HIGH.load(Ordering::Relaxed));
        // SAFETY: the range is checked to be this thread's own stack below
        // its current frame.
        unsafe { drop_below(low, high, sp) };
    }
    MAIN.ack();
}

/// `madvise(MADV_DONTNEED)` on `[low, page of sp - 1 page)` when `sp` lies in
/// `[low, high)`; the kB asked for.
///
/// # Safety
/// `[low, high)` must be the stack the caller runs on, `sp` an address in
/// the caller's frame: what lies a page and more below it is dead.
unsafe fn drop_below(low: usize, high: usize, sp: usize) -> usize {
    if !(low..high).contains(&sp) {
        return 0;
    }
    // A page of margin below the page this frame is in.
    let top = (sp & !4095).saturating_sub(4096);
    if top <= low {
        return 0;
    }
    // SAFETY: as the caller vouches, dead pages of its own stack.
    unsafe { super::raw::madvise(low, top - low, libc::MADV_DONTNEED) };
    (top - low) / 1024
}

/// The `[stack]` mapping (the main thread's).
fn stack_range() -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (lo, rest) = line.split_once('-')?;
    let hi = rest.split_whitespace().next()?;
    Some((
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake stack of 16 written pages; "sp" in page 10.
    #[test]
    fn pages_a_page_and_more_below_the_frame_go_and_the_rest_stays() {
        let len = 16 * 4096;
        // SAFETY: a fresh private anonymous mapping of ours.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping is ours and `len` long.
        let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        mem.fill(7);
        let low = p as usize;
        let sp = low + 10 * 4096 + 100;
        // SAFETY: the fake stack's "frame" is page 10; nothing lives below.
        assert_eq!(unsafe { drop_below(low, low + len, sp) }, 9 * 4);
        assert!(mem[..9 * 4096].iter().all(|&b| b == 0), "pages 0-8 dropped");
        assert!(
            mem[9 * 4096..].iter().all(|&b| b == 7),
            "the margin and above stay"
        );
        // An sp outside the range does nothing.
        mem.fill(7);
        // SAFETY: out of range: nothing is touched.
        assert_eq!(unsafe { drop_below(low, low + len, low + len + 4096) }, 0);
        assert!(mem.iter().all(|&b| b == 7));
        // SAFETY: unmapping our own mapping; `mem` is not used after.
        unsafe { libc::munmap(p, len) };
    }

    #[test]
    fn the_proc_path_is_built_on_the_stack() {
        let mut buf = [0u8; 48];
        assert_eq!(
            task_syscall_path(&mut buf, 4_194_304),
            Some("/proc/self/task/4194304/syscall")
        );
    }

    /// The wake allocates (it spawns a task): it must wait while a fork
    /// holds the fork lock, so no raw clone3 finds the trimmer in malloc.
    #[test]
    fn the_wake_waits_for_a_fork_in_progress() {
        use std::sync::atomic::AtomicU64;
        use std::time::Instant;
        static WOKE_AT_NS: AtomicU64 = AtomicU64::new(0);
        let t0 = Instant::now();
        // A process-wide registration: this is the only test that sets it.
        wake_with(move || {
            WOKE_AT_NS.store(t0.elapsed().as_nanos() as u64, Ordering::SeqCst);
        });
        MAIN.dirty.store(true, Ordering::SeqCst);
        let released_at = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let forker = s.spawn(move || {
                super::super::idle::no_trim_while(|| {
                    tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                    t0.elapsed().as_nanos() as u64
                })
            });
            rx.recv().unwrap();
            let_go(Duration::from_millis(1));
            forker.join().unwrap()
        });
        let woke = WOKE_AT_NS.load(Ordering::SeqCst);
        assert!(woke > 0, "the wake ran");
        assert!(
            woke >= released_at,
            "the wake ran at {woke} ns, inside the fork that held the lock until {released_at} ns"
        );
    }

    #[test]
    fn parking_off_the_main_stack_does_nothing_harmful() {
        // A test thread's stack is not `[stack]`: a no-op, and the thread runs on.
        let v = vec![1u8; 1 << 20];
        unparked();
        MAIN.due.store(true, Ordering::SeqCst);
        let done = MAIN.done.load(Ordering::SeqCst);
        parking();
        assert_eq!(v.iter().map(|&b| b as usize).sum::<usize>(), 1 << 20);
        assert_ne!(MAIN.done.load(Ordering::SeqCst), done, "the park acked");
    }

    #[test]
    fn a_thread_in_a_wait_reads_as_waiting_and_one_on_a_lock_or_running_not() {
        let file = |tid: i32| format!("/proc/self/task/{tid}/syscall");
        assert!(!waiting(&file(0)), "no such thread");
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = &stop;
            s.spawn(move || {
                tx.send(nix::unistd::gettid().as_raw()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            let path = file(rx.recv().unwrap());
            std::thread::sleep(Duration::from_millis(20));
            let running = !waiting(&path);
            stop.store(true, Ordering::Relaxed);
            assert!(running, "a spinning thread reads as waiting");
        });
        let (r, w) = nix::unistd::pipe().unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let lock = std::sync::Mutex::new(());
        let held = lock.lock().unwrap();
        let until = |path: &str, want: bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while waiting(path) != want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            waiting(path) == want
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
                // On a lock (a futex), then in a read.
                drop(lock.lock().unwrap());
                let mut b = [0u8; 1];
                nix::unistd::read(&r, &mut b).unwrap();
            });
            let path = file(tid_rx.recv().unwrap());
            // Blocked on the lock: a futex wait is not a runtime's wait.
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiting(&path), "a thread on a lock reads as waiting");
            drop(held);
            assert!(until(&path, true), "a thread blocked in read");
            nix::unistd::write(&w, b"x").unwrap();
        });
    }

    #[test]
    fn a_park_lets_go_only_when_asked_and_once_per_run() {
        let h = Handshake::new();
        assert_eq!(
            h.parking(),
            None,
            "not asked: a busy thread keeps its pages"
        );
        let long = Duration::from_secs(30);
        std::thread::scope(|s| {
            let asked = s.spawn(|| h.ask(&|| {}, long));
            // The runtime's thread, woken: its next park lets go and acks.
            while !h.due.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            assert_eq!(h.parking(), Some(true));
            h.ack();
            assert!(asked.join().unwrap());
        });
        assert_eq!(h.parking(), None, "one let-go per ask");
        // Nothing ran since: the trimmer neither wakes the thread nor waits.
        assert!(!h.ask(&|| panic!("woken with nothing to let go"), long));
        // A thread too busy to park within the limit lets go at its next park.
        h.dirty.store(true, Ordering::SeqCst);
        assert!(h.ask(&|| {}, Duration::from_millis(20)));
        assert_eq!(h.parking(), Some(true));
    }
}
