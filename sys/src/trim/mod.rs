//! Unmapping an idle process's clean file pages: the text and read-only
//! data of its binary and shared libraries that it touched once at start.
//!
//! The pages stay in the page cache, shared by every process that maps the
//! file; only this process's page-table entries go. A page used again is
//! mapped back by a minor fault from the cache. What it buys: the page
//! tables, and pages that the kernel may reclaim under pressure instead of
//! keeping them as mapped executable pages of hundreds of idle processes.
//!
//! Only mappings with no anonymous pages qualify: a private file mapping
//! that was written (relocated data, `.data.rel.ro`) would be read back
//! from the file by `MADV_DONTNEED`, losing the writes.

mod idle;
mod plan;
mod raw;
mod smaps;
pub mod stack;
pub use idle::{activity, no_trim_while, touch, trims};
pub use smaps::{trimmable, Mapping};

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Trims once activity has stopped: each burst of activity takes a
/// ticket, and a trim scheduled with a ticket runs only if no later
/// activity took another.
#[derive(Debug, Default)]
pub struct Quiet(AtomicU64);

impl Quiet {
    /// Records activity; returns its ticket.
    pub fn activity(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Nothing happened since the activity that took `ticket`.
    pub fn still(&self, ticket: u64) -> bool {
        self.0.load(Ordering::SeqCst) == ticket
    }

    /// The latest activity's ticket (0: none yet).
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
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
pub fn trim_self() -> io::Result<u64> {
    let mut spans = [(0usize, 0usize); MAX_SPANS];
    let n = plan(&mut spans)?;
    Ok(unmap(&spans[..n]))
}

/// Frees the heap's free pages and lists what to unmap: everything that
/// allocates or calls libc happens here, before the unmapping.
#[inline(never)]
fn plan(spans: &mut [plan::Span; MAX_SPANS]) -> io::Result<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut n = 0;
    {
        let mut planner = PLANNER.lock().unwrap_or_else(|e| e.into_inner());
        let planned = planner.spans(&maps, || std::fs::read_to_string("/proc/self/smaps"))?;
        for (slot, s) in spans.iter_mut().zip(planned) {
            *slot = *s;
            n += 1;
        }
    }
    drop(maps);
    // Last: the maps text just freed is heap too.
    // SAFETY: malloc_trim only releases free heap memory (MADV_DONTNEED on
    // free chunks); live allocations are untouched.
    unsafe { libc::malloc_trim(0) };
    Ok(n)
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
        let kb = trim_self().unwrap();
        assert!(kb > 0);
        // Code and read-only data are faulted back in from the file.
        let v: Vec<String> = (0..1000).map(|i| format!("{i:x}")).collect();
        assert_eq!(v[255], "ff");
        let after = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let left: u64 = trimmable(&after).iter().map(|m| m.rss_kb).sum();
        assert!(left < had, "{left} kB of {had} kB still mapped");
    }

    /// Resident kB of the mapping at `addr`, from smaps (which reads the
    /// mapping's page tables without touching its pages).
    fn rss_at(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        trimmable(&smaps)
            .iter()
            .find(|m| m.start == addr)
            .map_or(0, |m| m.rss_kb)
    }

    #[test]
    fn a_kept_plan_unmaps_what_was_used_again() {
        use std::io::Write;
        // A plan made before the mapping exists: the first round must see it.
        trim_self().unwrap();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[7u8; 64 << 10]).unwrap();
        f.flush().unwrap();
        let len = 64 << 10;
        // SAFETY: a fresh private read-only mapping of our own file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(f.as_file()),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let touch = || {
            // SAFETY: reads within the live mapping made above.
            (0..len)
                .step_by(4096)
                .map(|o| unsafe { std::ptr::read_volatile((p as *const u8).add(o)) } as u64)
                .sum::<u64>()
        };
        for round in 0..3 {
            assert_eq!(touch(), 7 * 16);
            assert!(
                rss_at(p as usize) > 0,
                "round {round}: touched pages are mapped"
            );
            let made = PLANNER.lock().unwrap().made();
            trim_self().unwrap();
            assert_eq!(
                rss_at(p as usize),
                0,
                "round {round}: the trim unmapped them"
            );
            if round > 0 {
                // Nothing was mapped since: the kept plan did it.
                assert_eq!(PLANNER.lock().unwrap().made(), made);
            }
        }
        // SAFETY: the mapping made above; nothing refers to it any more.
        unsafe { libc::munmap(p, len) };
    }
}
