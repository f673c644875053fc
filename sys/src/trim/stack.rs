//! The dead part of the main thread's stack: pages below the current frame
//! hold only frames of calls that returned (start-up, the last request). A
//! runtime on the main thread lets them go as it parks; the next deep call
//! faults in fresh zeroed pages.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The main thread's `[stack]` mapping, `[LOW, HIGH)` (HIGH 0: not read yet;
/// LOW = HIGH: none).
static LOW: AtomicUsize = AtomicUsize::new(0);
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// The thread ran since it last let go.
static DIRTY: AtomicBool = AtomicBool::new(true);

/// For the runtime's unpark hook: the thread runs again.
pub fn unparked() {
    DIRTY.store(true, Ordering::Relaxed);
}

/// For the runtime's park hook: when this thread runs on the `[stack]`
/// mapping (the main thread), lets go of its pages below this frame, once
/// per wake-up. On any other thread's stack it does nothing.
#[inline(never)]
pub fn parking() {
    if !DIRTY.swap(false, Ordering::Relaxed) {
        return;
    }
    if HIGH.load(Ordering::Relaxed) == 0 {
        let (low, high) = stack_range().unwrap_or((1, 1));
        LOW.store(low, Ordering::Relaxed);
        HIGH.store(high, Ordering::Relaxed);
    }
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let (low, high) = (LOW.load(Ordering::Relaxed), HIGH.load(Ordering::Relaxed));
    // SAFETY: the range is checked to be this thread's own stack below its
    // current frame.
    unsafe { drop_below(low, high, sp) };
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
    fn parking_off_the_main_stack_does_nothing_harmful() {
        // A test thread's stack is not `[stack]`: a no-op, and the thread runs on.
        let v = vec![1u8; 1 << 20];
        unparked();
        parking();
        assert_eq!(v.iter().map(|&b| b as usize).sum::<usize>(), 1 << 20);
    }
}
