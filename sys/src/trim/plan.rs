//! What a trim advises away, kept from one trim to the next. Reading smaps
//! walks every page-table entry and formats a dozen counters per mapping:
//! it was 40% of an idle shim's CPU when polled every 400 ms with the trim
//! at 250 ms. The plan depends only on the mappings of the trimmable kind,
//! so a trim reads the cheap `/proc/self/maps`, and smaps again only when
//! those lines changed (a dlopen).
//!
//! What maps cannot show is a clean mapping written since the plan: that
//! takes making it writable and back with the same bounds. Nothing in
//! rund's processes does that to a loaded object once ld.so has relocated
//! it; a dlopen's own relocation is of new mappings, which make a new plan.

use std::io;

use super::smaps;

/// `(start, len)`: one madvise.
pub type Span = (usize, usize);

pub struct Planner {
    /// The trimmable-kind lines of maps the spans were made for.
    key: String,
    spans: Vec<Span>,
    made: u64,
}

impl Planner {
    pub const fn new() -> Self {
        Planner {
            key: String::new(),
            spans: Vec::new(),
            made: 0,
        }
    }

    /// The spans for a process whose maps read `maps`; `read_smaps` is
    /// called only when the mappings of the trimmable kind changed.
    pub fn spans(
        &mut self,
        maps: &str,
        read_smaps: impl FnOnce() -> io::Result<String>,
    ) -> io::Result<&[Span]> {
        let key = smaps::kind_lines(maps);
        if self.made == 0 || key != self.key {
            let text = read_smaps()?;
            self.spans = merge(&smaps::clean(&text));
            self.key = key;
            self.made += 1;
        }
        Ok(&self.spans)
    }

    /// Plans made from smaps so far.
    #[cfg(test)]
    pub fn made(&self) -> u64 {
        self.made
    }
}

/// Adjacent clean mappings become one span: one madvise, one TLB flush.
fn merge(clean: &[smaps::Mapping]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for m in clean {
        match out.last_mut() {
            Some((start, len)) if *start + *len == m.start => *len = m.end - *start,
            _ => out.push((m.start, m.end - m.start)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::smaps::tests::SMAPS;
    use super::*;

    fn maps_of(smaps: &str) -> String {
        smaps
            .lines()
            .filter(|l| l.split(' ').next().unwrap().contains('-'))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn smaps_is_read_again_only_when_the_mappings_change() {
        let mut p = Planner::new();
        let maps = maps_of(SMAPS);
        let first = p.spans(&maps, || Ok(SMAPS.to_string())).unwrap().to_vec();
        // The shim's two clean mappings are adjacent: one span. The written
        // 55f0 mapping splits it from the rest.
        assert_eq!(
            first,
            vec![(0x55d0, 0x20), (0x7f20, 0x20)],
            "adjacent clean mappings merge"
        );
        // Same maps (the heap may move: not of the kind): no smaps read.
        let moved = maps.replace("7f00-7f10 rw-p", "7f00-7f18 rw-p");
        let again = p
            .spans(&moved, || panic!("smaps read for unchanged mappings"))
            .unwrap()
            .to_vec();
        assert_eq!((again, p.made()), (first, 1));
        // A library loaded since: smaps again.
        let grown = format!("{maps}8000-8010 r-xp 00000000 08:01 90 /usr/lib/libnew.so\n");
        let mut read = false;
        p.spans(&grown, || {
            read = true;
            Ok(SMAPS.to_string())
        })
        .unwrap();
        assert!(read && p.made() == 2);
    }

    #[test]
    fn a_failed_smaps_read_is_not_kept() {
        let mut p = Planner::new();
        let maps = maps_of(SMAPS);
        assert!(p.spans(&maps, || Err(io::ErrorKind::Other.into())).is_err());
        let spans = p.spans(&maps, || Ok(SMAPS.to_string())).unwrap();
        assert!(!spans.is_empty() && p.made() == 1);
    }
}
