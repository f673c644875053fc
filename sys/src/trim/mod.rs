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
mod raw;
pub mod stack;
pub use idle::{activity, no_trim_while, trims};

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// One trimmable mapping: `[start, end)`, read-only or read-execute,
/// private, file-backed, with no anonymous (written) page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub path: String,
    pub rss_kb: u64,
}

/// The trimmable mappings listed in a `/proc/<pid>/smaps` text.
pub fn trimmable(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut cur: Option<(Mapping, bool)> = None;
    let mut anon_kb = 0u64;
    let finish = |cur: Option<(Mapping, bool)>, anon_kb: u64, out: &mut Vec<Mapping>| {
        if let Some((m, ok)) = cur {
            if ok && anon_kb == 0 && m.rss_kb > 0 {
                out.push(m);
            }
        }
    };
    for line in smaps.lines() {
        if let Some(m) = header(line) {
            finish(cur.take(), anon_kb, &mut out);
            anon_kb = 0;
            cur = Some(m);
            continue;
        }
        let Some((m, _)) = cur.as_mut() else { continue };
        if let Some(v) = field_kb(line, "Rss:") {
            m.rss_kb = v;
        } else if let Some(v) = field_kb(line, "Anonymous:") {
            anon_kb = v;
        }
    }
    finish(cur, anon_kb, &mut out);
    out
}

/// `start-end perms offset dev inode path` → the mapping, and whether its
/// kind qualifies.
fn header(line: &str) -> Option<(Mapping, bool)> {
    let mut f = line.split_whitespace();
    let range = f.next()?;
    let (s, e) = range.split_once('-')?;
    let start = usize::from_str_radix(s, 16).ok()?;
    let end = usize::from_str_radix(e, 16).ok()?;
    let perms = f.next()?;
    if perms.len() != 4 {
        return None;
    }
    let _offset = f.next()?;
    let _dev = f.next()?;
    let inode: u64 = f.next()?.parse().ok()?;
    let path: String = f.collect::<Vec<_>>().join(" ");
    let ok = matches!(perms, "r-xp" | "r--p") && inode != 0 && path.starts_with('/');
    Some((
        Mapping {
            start,
            end,
            path,
            rss_kb: 0,
        },
        ok,
    ))
}

fn field_kb(line: &str, name: &str) -> Option<u64> {
    let rest = line.strip_prefix(name)?;
    rest.trim().strip_suffix("kB")?.trim().parse().ok()
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

/// The most mappings one trim unmaps (a process maps a few dozen files).
const MAX_SPANS: usize = 128;

/// Gives the heap's free pages back, then unmaps this process's trimmable
/// pages; returns the kB that were resident in those mappings.
#[inline(always)]
pub fn trim_self() -> io::Result<u64> {
    let mut spans = [(0usize, 0usize, 0u64); MAX_SPANS];
    let n = plan(&mut spans)?;
    Ok(unmap(&spans[..n]))
}

/// Frees the heap's free pages and lists what to unmap, (start, len, kB):
/// everything that allocates or calls libc happens here, before the
/// unmapping.
#[inline(never)]
fn plan(spans: &mut [(usize, usize, u64); MAX_SPANS]) -> io::Result<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut n = 0;
    for (slot, m) in spans.iter_mut().zip(trimmable(&smaps)) {
        *slot = (m.start, m.end - m.start, m.rss_kb);
        n += 1;
    }
    drop(smaps);
    // Last: the smaps text just freed is heap too.
    // SAFETY: malloc_trim only releases free heap memory (MADV_DONTNEED on
    // free chunks); live allocations are untouched.
    unsafe { libc::malloc_trim(0) };
    Ok(n)
}

/// The unmapping: raw syscalls only, no allocation, inlined into the
/// caller, so the code that runs after it (and faults its pages back with
/// their 64 KiB neighbours) is one small stretch of the caller's.
#[inline(always)]
fn unmap(spans: &[(usize, usize, u64)]) -> u64 {
    let mut kb = 0;
    for &(addr, len, rss) in spans {
        // Only page-table entries go: a later access faults the same file contents back.
        // SAFETY: a whole private, read-only, never-written file mapping of this process.
        if unsafe { raw::madvise(addr, len, libc::MADV_DONTNEED) } == 0 {
            kb += rss;
        }
    }
    kb
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0-55e0 r--p 00000000 08:01 123 /usr/bin/shim
Rss:                 944 kB
Anonymous:             0 kB
55e0-55f0 r-xp 00010000 08:01 123 /usr/bin/shim
Rss:                4744 kB
Anonymous:             0 kB
55f0-5600 r--p 00020000 08:01 123 /usr/bin/shim
Rss:                 408 kB
Anonymous:           408 kB
5600-5610 rw-p 00030000 08:01 123 /usr/bin/shim
Rss:                  16 kB
Anonymous:            16 kB
7f00-7f10 rw-p 00000000 00:00 0 [heap]
Rss:                 540 kB
Anonymous:           540 kB
7f10-7f20 r-xp 00000000 00:00 0 [vdso]
Rss:                   4 kB
Anonymous:             0 kB
7f20-7f30 r-xp 00000000 08:01 77 /usr/lib/lib with space.so
Rss:                   0 kB
Anonymous:             0 kB
7f30-7f40 r-xp 00000000 08:01 78 /usr/lib/libc.so.6
Rss:                1296 kB
Anonymous:             0 kB
";

    #[test]
    fn only_the_last_ticket_is_quiet() {
        let q = Quiet::default();
        let a = q.activity();
        assert!(q.still(a));
        let b = q.activity();
        assert!(!q.still(a) && q.still(b));
    }

    #[test]
    fn only_clean_read_only_file_mappings_qualify() {
        let got: Vec<(usize, u64)> = trimmable(SMAPS)
            .into_iter()
            .map(|m| (m.start, m.rss_kb))
            .collect();
        // Relocated data (anonymous pages), writable data, the heap, the
        // vdso and an untouched mapping are left alone.
        assert_eq!(got, vec![(0x55d0, 944), (0x55e0, 4744), (0x7f30, 1296)]);
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
}
