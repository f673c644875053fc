//! The trimmable spans from the loader's own list of loaded objects
//! (`dl_iterate_phdr`): each object's loadable segments that are not
//! writable, the binary's, every library's and ld.so's, but not the vdso.
//!
//! No `/proc` read: a trim costs a walk of a few dozen program headers, and
//! the loader's counters of objects added and removed tell when a dlopen or
//! dlclose changed the list.
//!
//! A non-writable segment is never written by ld.so: the data it relocates
//! (RELRO) lives in a writable segment that is made read-only afterwards,
//! and rund's objects have no text relocations. ld.so maps each segment
//! from the page holding its start to the page holding its end, and no two
//! segments share a page, so the rounded span is that segment's own mapping.

use std::ffi::c_void;

use super::plan::Span;

/// `(objects added, objects removed)` since the process started, as the
/// loader counts them: the list changed when this did.
pub type Generation = (u64, u64);

/// The loader's counters now; stops at the first object.
pub fn generation() -> Generation {
    walk(true).generation
}

/// The non-writable segments of every loaded object, sorted, with their
/// generation (read in the same walk).
pub fn segments() -> (Generation, Vec<Span>) {
    let mut w = walk(false);
    w.spans.sort_unstable();
    (w.generation, w.spans)
}

struct Walk {
    /// Stop at the first object, once its counters are read.
    generation_only: bool,
    vdso: usize,
    generation: Generation,
    spans: Vec<Span>,
}

fn walk(generation_only: bool) -> Walk {
    let mut walk = Walk {
        generation_only,
        vdso: vdso(),
        generation: (0, 0),
        spans: Vec::new(),
    };
    // SAFETY: the callback reads the loader's info for the duration of each
    // call and pushes into the `Walk` that `data` points to, which outlives
    // the call; it does not unwind.
    unsafe { libc::dl_iterate_phdr(Some(each_object), (&raw mut walk).cast()) };
    walk
}

fn vdso() -> usize {
    // SAFETY: getauxval reads the auxiliary vector; 0 when absent.
    unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) as usize }
}

/// The info's counters, when this libc passes them.
fn counters(info: &libc::dl_phdr_info, size: usize) -> Option<Generation> {
    let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>();
    (size >= end).then_some((info.dlpi_adds, info.dlpi_subs))
}

unsafe extern "C" fn each_object(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid info for this call; `data` is the
    // `Walk` that `walk` passed.
    let (info, walk) = unsafe { (&*info, &mut *data.cast::<Walk>()) };
    if let Some(g) = counters(info, size) {
        walk.generation = g;
    }
    if walk.generation_only {
        return 1;
    }
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader's program headers of this object, `dlpi_phnum`
        // of them, live while it stays loaded (through this call).
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let base = info.dlpi_addr as usize;
    let loads = phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
    let is_vdso = loads.clone().any(|p| {
        let start = base.wrapping_add(p.p_vaddr as usize);
        (start..start.saturating_add(p.p_memsz as usize)).contains(&walk.vdso)
    });
    if is_vdso {
        return 0;
    }
    for p in loads.filter(|p| p.p_flags & libc::PF_W == 0 && p.p_memsz > 0) {
        let start = base.wrapping_add(p.p_vaddr as usize);
        if let Some(span) = page_span(start, p.p_memsz as usize) {
            walk.spans.push(span);
        }
    }
    0
}

/// `[start, start + len)` widened to whole pages, as ld.so maps a segment.
fn page_span(start: usize, len: usize) -> Option<Span> {
    let page = page_size();
    let first = start & !(page - 1);
    let end = start.checked_add(len)?.checked_add(page - 1)? & !(page - 1);
    (end > first).then_some((first, end - first))
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_whole_pages_around_the_segment() {
        assert_eq!(page_span(0x2234, 0x100), Some((0x2000, 0x1000)));
        assert_eq!(page_span(0x2000, 0x1001), Some((0x2000, 0x2000)));
        assert_eq!(page_span(usize::MAX - 10, 100), None);
    }

    /// Every span is inside a read-only, never-written file mapping, as
    /// smaps shows it: the walk must not name the vdso, the heap or
    /// relocated data.
    #[test]
    fn every_segment_is_a_clean_read_only_file_mapping() {
        let _loader = super::super::tests::LOADER.lock();
        let (g, spans) = segments();
        assert!(g.0 > 0, "the loader counts the objects loaded at start");
        assert!(spans.len() >= 2, "the binary and libc at least: {spans:x?}");
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let clean = super::super::smaps::clean(&smaps);
        for &(start, len) in &spans {
            let mut at = start;
            while at < start + len {
                let m = clean
                    .iter()
                    .find(|m| m.start <= at && at < m.end)
                    .unwrap_or_else(|| {
                        panic!("{at:#x} of span {start:#x}+{len:#x} is not a clean file mapping")
                    });
                at = m.end;
            }
        }
        assert_eq!(generation(), g, "nothing was loaded in between");
    }
}
