//! The two syscalls that run after an unmapping, made inline: through
//! libc each would fault a 64 KiB window of libc's text back in (the
//! kernel's fault-around), the very pages the trim just let go.

use std::sync::atomic::AtomicU32;

/// madvise(2); the kernel's return value (0 or -errno).
///
/// # Safety
/// As madvise: `[addr, addr + len)` must be a mapping whose contents the
/// caller may drop.
#[inline(always)]
pub unsafe fn madvise(addr: usize, len: usize, advice: i32) -> isize {
    // SAFETY: the caller vouches for the range; the asm only makes the call.
    unsafe { syscall3(libc::SYS_madvise as usize, addr, len, advice as usize) }
}

/// Waits while `word` holds `seen` (FUTEX_WAIT_PRIVATE, no timeout); may
/// return early (a wake, a signal, or `word` already changed).
#[inline(always)]
pub fn futex_wait(word: &AtomicU32, seen: u32) {
    wait(word, seen, None);
}

/// [`futex_wait`] for at most `limit`.
pub fn futex_wait_for(word: &AtomicU32, seen: u32, limit: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: limit.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    wait(word, seen, Some(&ts));
}

#[inline(always)]
fn wait(word: &AtomicU32, seen: u32, limit: Option<&libc::timespec>) {
    let op = (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as usize;
    // A match, not a closure: nothing here may be a call after a trim.
    let ts = match limit {
        Some(t) => t as *const libc::timespec as usize,
        None => 0,
    };
    // SAFETY: a futex wait on a live u32 of ours; the fourth argument is
    // FUTEX_WAIT's relative timeout: null (none) or a live timespec.
    unsafe {
        syscall4(
            libc::SYS_futex as usize,
            word.as_ptr() as usize,
            op,
            seen as usize,
            ts,
        )
    };
}

/// Wakes one waiter of `word` (FUTEX_WAKE_PRIVATE).
pub fn futex_wake(word: &AtomicU32) {
    let op = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as usize;
    // SAFETY: a futex wake on a live u32 of ours touches no memory.
    unsafe { syscall3(libc::SYS_futex as usize, word.as_ptr() as usize, op, 1) };
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn syscall3(nr: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: as the caller's; the fourth argument is unused by such calls.
    unsafe { syscall4(nr, a, b, c, 0) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn syscall4(nr: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux syscall convention; rcx and r11 are
    // clobbered by the instruction, memory may be read by the kernel.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn syscall3(nr: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: as the caller's; the fourth argument is unused by such calls.
    unsafe { syscall4(nr, a, b, c, 0) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn syscall4(nr: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: as the caller's; elsewhere libc's wrapper (its pages may come back).
    unsafe { libc::syscall(nr as libc::c_long, a, b, c, d) as isize }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn futex_wait_returns_at_once_when_the_word_moved_and_wakes_on_wake() {
        let w = AtomicU32::new(1);
        futex_wait(&w, 0);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                w.store(2, Ordering::SeqCst);
                futex_wake(&w);
            });
            while w.load(Ordering::SeqCst) == 1 {
                futex_wait(&w, 1);
            }
        });
    }

    #[test]
    fn futex_wait_for_ends_at_its_limit() {
        let w = AtomicU32::new(1);
        let t = std::time::Instant::now();
        futex_wait_for(&w, 1, std::time::Duration::from_millis(30));
        assert!(t.elapsed() >= std::time::Duration::from_millis(25));
    }

    #[test]
    fn madvise_reports_errors_and_succeeds_on_a_mapping() {
        // SAFETY: an unaligned address is refused before anything happens.
        let unaligned = unsafe { madvise(1, 4096, libc::MADV_DONTNEED) };
        assert_eq!(unaligned, -(libc::EINVAL as isize));
        let v = vec![7u8; 1 << 16];
        let page = (v.as_ptr() as usize + 4095) & !4095;
        // SAFETY: MADV_WILLNEED only hints; the heap page is ours.
        assert_eq!(unsafe { madvise(page, 4096, libc::MADV_WILLNEED) }, 0);
    }
}
