//! libibverbs is loaded on first use, and a failed load is not kept: a
//! long-lived node shim finds rdma-core installed after it started.

use std::path::Path;
use std::process::Command;

use rund_check::verbs::real::RealProvider;
use rund_check::verbs::{VerbsError, VerbsProvider};

/// Set in the child run: the directory whose empty libibverbs.so.1 shadows
/// the real one through LD_LIBRARY_PATH.
const CHILD: &str = "RUND_VERBS_LOADING_CHILD";
const TEST: &str = "a_failed_load_is_tried_again_once_the_library_is_there";
const DONE: &str = "verbs-loading child: both loads checked";

#[test]
fn a_failed_load_is_tried_again_once_the_library_is_there() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
        return;
    }
    if let Err(VerbsError::NoLibrary(why)) = RealProvider.device_names() {
        rund_skip::skip!("libibverbs is not installed here: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("libibverbs.so.1"), b"").unwrap();
    // ld.so reads LD_LIBRARY_PATH once, at exec: hence a child process.
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path())
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(DONE),
        "the child did not run the checks: {text}"
    );
}

fn child(dir: &Path) {
    match RealProvider.device_names() {
        Err(VerbsError::NoLibrary(why)) => assert!(why.contains("file too short"), "{why}"),
        other => panic!("the empty library was not the one tried: {other:?}"),
    }
    std::fs::remove_file(dir.join("libibverbs.so.1")).unwrap();
    match RealProvider.device_names() {
        Ok(_) | Err(VerbsError::NoDevices) => println!("{DONE}"),
        Err(e) => panic!("the library was not loaded on the second try: {e}"),
    }
}
