//! Host id ranges are leased by sandbox id: a running pod's range is never handed to another
//! pod of the same id (the same container id in another containerd namespace). That pod's
//! Create is refused with an error that says why, and leaves nothing behind.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use rund_tests::containerd::RunSpec;
use rund_tests::pernode::*;
use rund_tests::{assert_no_leaks_within, Containerd, ContainerdOpts, LeakSnapshot};

#[test]
fn a_running_pods_ids_are_not_given_to_the_same_id_in_another_namespace() {
    let opts = ContainerdOpts {
        rund_config: Some("[userns]\nmode = \"always\"\n".into()),
        ..ContainerdOpts::new()
    };
    let Some(ctd) = Containerd::start_rund_or_skip(
        "a_running_pods_ids_are_not_given_to_the_same_id_in_another_namespace",
        opts,
    ) else {
        return;
    };
    let rootfs = ctd.busybox_rootfs().unwrap();
    let before = LeakSnapshot::take(&ctd);
    run_detached(&ctd, "twin", &rootfs);
    let owner = task_pid(&ctd, "twin");
    let map = std::fs::read_to_string(format!("/proc/{owner}/uid_map")).unwrap();
    assert!(
        map.split_whitespace().nth(1).is_some_and(|h| h != "0"),
        "remapped: {map}"
    );

    let other = RunSpec {
        namespace: Some("rund-other".into()),
        detach: true,
        ..spec(&ctd, "twin", &rootfs, &["sleep", "100000"])
    };
    let out = ctd.run_spec(&other).unwrap();
    assert!(!out.success(), "the second twin started: {out:?}");
    assert!(
        out.stderr.contains("already holds host ids"),
        "the error names the clash: {out:?}"
    );
    let _ = ctd.ctr_in("rund-other", &["container", "rm", "twin"]);

    remove(&ctd, "twin");
    assert_no_leaks_within(&ctd, &before, GRACE);
}
