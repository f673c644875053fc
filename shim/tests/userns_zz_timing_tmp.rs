use rund_shim::sandbox::idmap::IdMapping;
use rund_shim::userns::*;
use std::os::fd::AsFd;
#[test]
fn timing() {
    let m = vec![IdMapping {
        container_id: 0,
        host_id: 1_000_000,
        size: 65536,
    }];
    let t = std::time::Instant::now();
    for _ in 0..100 {
        let _ = userns_with_maps(&m, &m).unwrap();
    }
    eprintln!("TIMING userns_with_maps {:?}", t.elapsed() / 100);
    let ns = userns_with_maps(&m, &m).unwrap();
    let d = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    for _ in 0..100 {
        let _ = idmapped_clone(d.path(), true, ns.as_fd()).unwrap();
    }
    eprintln!("TIMING idmapped_clone {:?}", t.elapsed() / 100);
    let dir = tempfile::tempdir().unwrap();
    let s = LeaseStore::new(dir.path(), &rund_shim::config::UsernsConfig::default()).unwrap();
    let t = std::time::Instant::now();
    for i in 0..50 {
        s.allocate(&format!("s{i}"), std::process::id() as i32)
            .unwrap();
    }
    eprintln!("TIMING allocate (up to 50 leases) {:?}", t.elapsed() / 50);
}
