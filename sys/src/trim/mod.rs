//! Unmapping an idle process's clean file pages: the text and read-only
//! data of its binary and shared libraries that it touched once at start.
//!
//! The pages stay in the page cache, shared by every process that maps the
//! file; only this process's page-table entries go. A page used again is
//! mapped back by a minor fault from the cache. What it buys: the page
//! tables, and pages that the kernel may reclaim under pressure instead of
//! keeping them as mapped executable pages of hundreds of idle processes.
//!
//! Only the loaded objects' non-writable segments qualify (`loaded`): a
//! private file mapping that was written (relocated data, `.data.rel.ro`)
//! would be read back from the file by `MADV_DONTNEED`, losing the writes.

mod idle;
mod loaded;
mod plan;
mod raw;
mod smaps;
pub mod stack;
pub use idle::{activity, no_trim_while, poll, thread_exit, touch, trims};
#[cfg(test)]
use smaps::clean;
pub use smaps::{trimmable, Mapping};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Trims once activity has stopped: each burst of activity takes a
/// ticket and notes its time, and a trim scheduled with a ticket runs only
/// if no later activity took another.
#[derive(Debug, Default)]
pub struct Quiet {
    ticket: AtomicU64,
    /// When the latest activity came, as nanoseconds since [`epoch`].
    at_ns: AtomicU64,
}

/// The monotonic origin of [`Quiet`]'s times.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Quiet {
    /// Records activity; returns its ticket.
    pub fn activity(&self) -> u64 {
        // The time first: whoever sees the new ticket sees its time.
        self.at_ns.fetch_max(now_ns(), Ordering::SeqCst);
        self.ticket.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Nothing happened since the activity that took `ticket`.
    pub fn still(&self, ticket: u64) -> bool {
        self.ticket.load(Ordering::SeqCst) == ticket
    }

    /// The latest activity's ticket (0: none yet).
    pub fn current(&self) -> u64 {
        self.ticket.load(Ordering::SeqCst)
    }

    /// How long ago the latest activity came.
    pub fn since_last(&self) -> Duration {
        Duration::from_nanos(now_ns().saturating_sub(self.at_ns.load(Ordering::SeqCst)))
    }
}

/// For a process that is idle nearly all its life: one malloc arena (every
/// thread would otherwise get, and keep, its own), and a fixed threshold
/// above which allocations are mmapped and the top of the heap is given
/// back, so large frees go back to the kernel.
pub fn lean_malloc(threshold: usize) {
    let t = i32::try_from(threshold).unwrap_or(i32::MAX);
    // SAFETY: mallopt only sets allocator parameters; callers run it before
    // any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, t);
        libc::mallopt(libc::M_TRIM_THRESHOLD, t);
    }
}

/// The most spans one trim advises (a process maps a few dozen files).
const MAX_SPANS: usize = 128;

/// The plan kept between this process's trims.
static PLANNER: Mutex<plan::Planner> = Mutex::new(plan::Planner::new());

/// Gives the heap's free pages back, then unmaps this process's trimmable
/// pages; returns the kB of the spans it advised (resident or not).
#[inline(always)]
pub fn trim_self() -> u64 {
    let mut spans = [(0usize, 0usize); MAX_SPANS];
    let n = plan(&mut spans);
    unmap(&spans[..n])
}

/// Frees the heap's free pages and lists what to unmap: everything that
/// allocates or calls libc happens here, before the unmapping.
#[inline(never)]
fn plan(spans: &mut [plan::Span; MAX_SPANS]) -> usize {
    let mut n = 0;
    {
        let mut planner = PLANNER.lock().unwrap_or_else(|e| e.into_inner());
        let planned = planner.spans(loaded::generation(), loaded::segments);
        for (slot, s) in spans.iter_mut().zip(planned) {
            *slot = *s;
            n += 1;
        }
    }
    // SAFETY: malloc_trim only releases free heap memory (MADV_DONTNEED on
    // free chunks); live allocations are untouched.
    unsafe { libc::malloc_trim(0) };
    n
}

/// The unmapping: raw syscalls only, no allocation, inlined into the
/// caller, so the code that runs after it (and faults its pages back with
/// their 64 KiB neighbours) is one small stretch of the caller's.
#[inline(always)]
fn unmap(spans: &[plan::Span]) -> u64 {
    let mut kb = 0;
    for &(addr, len) in spans {
        // Only page-table entries go: a later access faults the same file contents back.
        // SAFETY: whole private, read-only, never-written file mappings of this process.
        if unsafe { raw::madvise(addr, len, libc::MADV_DONTNEED) } == 0 {
            kb += len as u64 >> 10;
        }
    }
    kb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_ticket_is_quiet() {
        let q = Quiet::default();
        let a = q.activity();
        assert!(q.still(a));
        let b = q.activity();
        assert!(!q.still(a) && q.still(b));
    }

    #[test]
    fn trimming_itself_keeps_the_process_working() {
        let before = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let had: u64 = trimmable(&before).iter().map(|m| m.rss_kb).sum();
        assert!(had > 0, "a running test maps its own text");
        let kb = trim_self();
        assert!(kb > 0);
        // Code and read-only data are faulted back in from the file.
        let v: Vec<String> = (0..1000).map(|i| format!("{i:x}")).collect();
        assert_eq!(v[255], "ff");
        let after = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let left: u64 = trimmable(&after).iter().map(|m| m.rss_kb).sum();
        assert!(left < had, "{left} kB of {had} kB still mapped");
    }

    /// Held by the tests that load or count loaded objects.
    pub(super) static LOADER: Mutex<()> = Mutex::new(());

    /// Resident kB of `path`'s clean mappings, from smaps (which reads the
    /// page tables without touching the pages).
    fn rss_of(path_part: &str) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        trimmable(&smaps)
            .iter()
            .filter(|m| m.path.contains(path_part))
            .map(|m| m.rss_kb)
            .sum()
    }

    /// Reads every page of `path`'s clean mappings, text included.
    fn touch(path_part: &str) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        for m in clean(&smaps).iter().filter(|m| m.path.contains(path_part)) {
            for at in (m.start..m.end).step_by(4096) {
                // SAFETY: a readable mapping of a loaded library, which stays
                // loaded for the whole test.
                unsafe { std::ptr::read_volatile(at as *const u8) };
            }
        }
    }

    #[test]
    fn a_kept_plan_unmaps_what_was_used_again() {
        let _loader = LOADER.lock().unwrap_or_else(|e| e.into_inner());
        // A plan made before the library is loaded: the first round must see it.
        trim_self();
        // zlib is Priority: required in Debian, and no test binary links it.
        let name = c"libz.so.1";
        // SAFETY: dlopen of a system library with no constructors of note;
        // closed below.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen libz.so.1 failed");
        for round in 0..3 {
            touch("libz.so");
            assert!(
                rss_of("libz.so") > 0,
                "round {round}: touched pages are mapped"
            );
            let made = PLANNER.lock().unwrap().made();
            trim_self();
            assert_eq!(
                rss_of("libz.so"),
                0,
                "round {round}: the trim unmapped them"
            );
            let now = PLANNER.lock().unwrap().made();
            if round == 0 {
                assert_eq!(now, made + 1, "the dlopen made a new plan");
            } else {
                assert_eq!(now, made, "nothing was loaded since: the kept plan did it");
            }
        }
        // SAFETY: the handle from dlopen above; nothing of libz is in use.
        unsafe { libc::dlclose(handle) };
    }
}
