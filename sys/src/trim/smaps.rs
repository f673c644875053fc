//! Which of a process's mappings hold clean file pages that a trim may
//! drop, read from `/proc/<pid>/smaps` (the per-mapping anonymous page
//! counts are only there): how the tests see what a trim left.

/// One private, read-only (or read-execute), file-backed mapping:
/// `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub path: String,
    pub rss_kb: u64,
}

/// The trimmable mappings listed in a `/proc/<pid>/smaps` text: clean (no
/// anonymous page) and with pages resident.
pub fn trimmable(smaps: &str) -> Vec<Mapping> {
    let mut out = clean(smaps);
    out.retain(|m| m.rss_kb > 0);
    out
}

/// Every mapping of the trimmable kind with no anonymous (written) page,
/// resident or not.
pub fn clean(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut cur: Option<(Mapping, bool)> = None;
    let mut anon_kb = 0u64;
    let finish = |cur: Option<(Mapping, bool)>, anon_kb: u64, out: &mut Vec<Mapping>| {
        if let Some((m, true)) = cur {
            if anon_kb == 0 {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub const SMAPS: &str = "\
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
    fn clean_keeps_untouched_mappings_and_drops_written_ones() {
        let got: Vec<usize> = clean(SMAPS).into_iter().map(|m| m.start).collect();
        assert_eq!(got, vec![0x55d0, 0x55e0, 0x7f20, 0x7f30]);
    }
}
