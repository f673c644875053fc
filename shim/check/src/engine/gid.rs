//! RoCE GID selection as perftest does it when `-x` is not given: walk the port's table keeping
//! the best entry so far; an IPv4-mapped GID beats one that is not, and otherwise RoCE v2 beats
//! v1. On a typical table (fe80 v1, fe80 v2, ::ffff:a.b.c.d v1, ::ffff:a.b.c.d v2) that is the
//! IPv4-mapped RoCE v2 entry. Unlike perftest's loop, an IPv4-mapped entry is never traded for
//! a later non-mapped RoCE v2 one, and unreadable entries are skipped rather than fatal.

use crate::verbs::{GidType, Verbs, VerbsError};

/// `::ffff:a.b.c.d` (and perftest's IPv4-encoded multicast form `ff0e::ffff:a.b.c.d`).
pub fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    let tail = gid[8..10] == [0, 0] && gid[10..12] == [0xff, 0xff];
    tail && (gid[..8] == [0; 8] || gid[..8] == [0xff, 0x0e, 0, 0, 0, 0, 0, 0])
}

fn rank(t: Option<GidType>) -> u8 {
    match t {
        Some(GidType::RoceV2) => 2,
        Some(GidType::IbRoceV1) => 1,
        None => 0,
    }
}

/// The index perftest would pick on `port` of a table of `table_len` entries.
pub fn best_gid_index<V: Verbs + ?Sized>(
    dev: &mut V,
    port: u8,
    table_len: u32,
) -> Result<u32, VerbsError> {
    let mut best = 0u32;
    for i in 1..table_len {
        let cur = dev.query_gid(port, best)?;
        let Ok(rival) = dev.query_gid(port, i) else {
            continue;
        };
        let (v4, rival_v4) = (is_ipv4_mapped(&cur), is_ipv4_mapped(&rival));
        if rival_v4 && !v4 {
            best = i;
        } else if rival_v4 == v4 {
            // perftest skips entries whose type it cannot read (empty ones).
            let (Ok(Some(a)), Ok(Some(b))) =
                (dev.query_gid_type(port, best), dev.query_gid_type(port, i))
            else {
                continue;
            };
            if rank(Some(b)) > rank(Some(a)) {
                best = i;
            }
        }
    }
    Ok(best)
}
