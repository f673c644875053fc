//! What a trim advises away, kept from one trim to the next: the spans
//! depend only on which objects are loaded, so they are listed again only
//! when the loader's generation changed (a dlopen or a dlclose).
//!
//! The plan used to come from `/proc/self/smaps`, then from `/proc/self/maps`
//! with smaps read again on a change; the loader's own list needs no `/proc`
//! read at all (`loaded`).

use super::loaded::Generation;

/// `(start, len)`: one madvise.
pub type Span = (usize, usize);

pub struct Planner {
    /// The generation the spans were listed at; `None` before the first.
    key: Option<Generation>,
    spans: Vec<Span>,
    made: u64,
}

impl Planner {
    pub const fn new() -> Self {
        Planner {
            key: None,
            spans: Vec::new(),
            made: 0,
        }
    }

    /// The spans at generation `now`; `list` (the spans, sorted, and the
    /// generation it saw) is called only when the generation changed.
    pub fn spans(
        &mut self,
        now: Generation,
        list: impl FnOnce() -> (Generation, Vec<Span>),
    ) -> &[Span] {
        if self.key != Some(now) {
            // The walk holds the loader's lock: its spans are of the
            // generation it saw, which may be newer than `now`.
            let (seen, spans) = list();
            self.spans = merge(&spans);
            self.key = Some(seen);
            self.made += 1;
        }
        &self.spans
    }

    /// Plans listed so far.
    #[cfg(test)]
    pub fn made(&self) -> u64 {
        self.made
    }
}

/// Adjacent spans become one: one madvise, one TLB flush.
fn merge(sorted: &[Span]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for &(start, len) in sorted {
        match out.last_mut() {
            Some((s, l)) if *s + *l == start => *l += len,
            _ => out.push((start, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPANS: [Span; 3] = [(0x1000, 0x1000), (0x2000, 0x3000), (0x9000, 0x1000)];

    #[test]
    fn spans_are_listed_again_only_when_the_generation_changes() {
        let mut p = Planner::new();
        let first = p.spans((5, 0), || ((5, 0), SPANS.to_vec())).to_vec();
        assert_eq!(
            first,
            vec![(0x1000, 0x4000), (0x9000, 0x1000)],
            "adjacent spans merge"
        );
        let again = p
            .spans((5, 0), || {
                panic!("listed again for an unchanged generation")
            })
            .to_vec();
        assert_eq!((again, p.made()), (first, 1));
        // A dlopen since: listed again.
        let grown = p
            .spans((6, 0), || {
                ((6, 0), vec![(0x1000, 0x1000), (0x20000, 0x2000)])
            })
            .to_vec();
        assert_eq!(
            (grown, p.made()),
            (vec![(0x1000, 0x1000), (0x20000, 0x2000)], 2)
        );
        // A dlclose is a change too.
        p.spans((6, 1), || ((6, 1), vec![(0x1000, 0x1000)]));
        assert_eq!(p.made(), 3);
    }

    #[test]
    fn the_plan_is_keyed_on_the_generation_its_walk_saw() {
        let mut p = Planner::new();
        // A dlopen between reading the generation and the walk.
        p.spans((5, 0), || ((6, 0), SPANS.to_vec()));
        p.spans((6, 0), || panic!("the walk already saw generation 6"));
        assert_eq!(p.made(), 1);
    }
}
