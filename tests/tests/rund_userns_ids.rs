//! Host id ranges are leased by sandbox id: a running pod's range is never handed to another
//! pod of the same id (the same container id in another containerd namespace). That pod's
//! Create is refused with an error that says why, and leaves nothing behind.
//!
//! Skipped (with a message) until rund's binaries are built; `RUND_REQUIRE_BINS=1` makes that
//! a failure.

use std::time::{Duration, Instant};

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

    // The twin has been running a while (its agent began well before the
    // second pod's bundle), as a real clash looks.
    std::thread::sleep(Duration::from_millis(200));
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
    // containerd's clean-up of the refused pod (the `delete` action, whose
    // stderr containerd logs) leaves the running twin's ids to it and says
    // so, instead of waiting for the twin's agent to die.
    let deadline = Instant::now() + Duration::from_secs(60);
    let said = "which began before this bundle (another running sandbox with this id)";
    while !std::fs::read_to_string(&ctd.log)
        .unwrap_or_default()
        .contains(said)
    {
        assert!(
            Instant::now() < deadline,
            "the refused pod's clean-up did not tell the twin's ids apart:\n{}",
            ctd.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = ctd.ctr_in("rund-other", &["container", "rm", "twin"]);

    remove(&ctd, "twin");
    assert_no_leaks_within(&ctd, &before, GRACE);
}
