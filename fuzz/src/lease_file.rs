//! The node-wide user-namespace lease file (`<state_dir>/userns/leases.json`):
//! every shim reads it under flock. What parses must be what `allocate`
//! relies on, and must survive being written back.

use rund_shim::userns::lease::file::{parse, render};
use rund_shim::userns::lease::SPEC_INDEX;

pub fn run(data: &[u8]) {
    let Ok(file) = parse(data) else {
        return;
    };
    let leases = &file.leases;
    let end = |b: u32, s: u32| b as u64 + s as u64;
    for (i, l) in leases.iter().enumerate() {
        let r = &l.lease;
        assert!(!l.sandbox_id.is_empty());
        // Host id 0 is host root, and a map may not reach 2^32-1.
        assert!(r.size > 0 && r.host_base > 0, "{l:?}");
        assert!(end(r.host_base, r.size) <= u32::MAX as u64, "{l:?}");
        for o in &leases[..i] {
            if r.index == SPEC_INDEX && o.lease.index == SPEC_INDEX {
                continue;
            }
            assert_ne!(o.sandbox_id, l.sandbox_id, "two leases");
            let apart = end(r.host_base, r.size) <= o.lease.host_base as u64
                || end(o.lease.host_base, o.lease.size) <= r.host_base as u64;
            assert!(apart, "{o:?} and {l:?} overlap");
        }
    }
    let written = render(&file);
    let again = parse(&written).unwrap_or_else(|e| panic!("its own output is refused: {e}"));
    assert_eq!(again.version, file.version);
    assert_eq!(
        &again.leases, leases,
        "a store/load round trip changed the leases"
    );
    assert_eq!(render(&again), written);
}
