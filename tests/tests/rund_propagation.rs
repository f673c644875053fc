//! rootfsPropagation through ctr with hand-made specs, runc (the reference) and rund side by
//! side, on a shared host tmpfs bound as a volume: rshared carries mounts both ways, the
//! default rslave only into the container, rprivate neither; in rund's user namespace
//! nothing ever goes back to the host, and shared values are refused at Create.

use std::time::Duration;

use rund_tests::fsview::*;
use rund_tests::ocispec::set_annotation;
use rund_tests::{assert_no_leaks_within, Containerd, LeakSnapshot, RUND_RUNTIME};
use serde_json::json;

/// Waits for /vol/go, records whether the host's mount arrived, mounts a tmpfs of its own
/// under the volume and says so in /vol/done (on the shared tmpfs itself, which the host sees
/// whatever the propagation).
const PROPAGATION_SCRIPT: &str = "while [ ! -e /vol/go ]; do sleep 0.05; done; \
     if [ -e /vol/fromhost/flag ]; then echo yes > /vol/saw; else echo no > /vol/saw; fi; \
     mount -t tmpfs ctr /vol/fromctr && touch /vol/fromctr/ok && touch /vol/done; \
     exec sleep 1000";

/// Runs PROPAGATION_SCRIPT with the volume bound at /vol; returns (the container saw the
/// host's mount, the host saw the container's).
fn propagation_round(
    ctd: &Containerd,
    rt: &str,
    id: &str,
    root: Option<&str>,
    bind_opts: &[&str],
    userns: bool,
) -> (bool, bool) {
    let vol = SharedVol::new(ctd.dir.join(format!("vol-{id}")));
    let mut spec = sh(ctd, id, PROPAGATION_SCRIPT);
    let mut opts = vec!["rbind"];
    opts.extend(bind_opts);
    add_mount(
        &mut spec,
        json!({"destination": "/vol", "type": "bind", "source": vol.0, "options": opts}),
    );
    if let Some(p) = root {
        spec["linux"]["rootfsPropagation"] = json!(p);
    }
    add_cap(&mut spec, "CAP_SYS_ADMIN");
    if userns {
        set_annotation(&mut spec, "rund.io/userns", "pod");
    }
    run_detached(ctd, rt, id, &spec);
    vol.mount_from_host();
    std::fs::write(vol.0.join("go"), "").unwrap();
    wait_for(&format!("{id}: /vol/done"), || vol.0.join("done").exists());
    let saw = std::fs::read_to_string(vol.0.join("saw")).unwrap();
    let back = vol.0.join("fromctr/ok").exists();
    ctd.remove_container(id);
    (saw.trim() == "yes", back)
}

#[test]
fn rshared_rootfs_propagation_is_bidirectional() {
    let Some(ctd) = start("rshared_rootfs_propagation_is_bidirectional") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    for rt in BOTH {
        let id = format!("rshared-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, Some("rshared"), &["rshared"], false);
        assert_eq!(
            got,
            (true, true),
            "{rt}: (host->container, container->host)"
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

#[test]
fn default_rslave_propagation_receives_and_never_sends() {
    let Some(ctd) = start("default_rslave_propagation_receives_and_never_sends") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    for rt in BOTH {
        let id = format!("rslave-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, None, &[], false);
        assert_eq!(
            got,
            (true, false),
            "{rt}: (host->container, container->host)"
        );
        let id = format!("rprivate-{}", short(rt));
        let got = propagation_round(&ctd, rt, &id, Some("rprivate"), &[], false);
        assert_eq!(got, (false, false), "{rt}: rprivate");
    }
    // rund's own user namespace, no propagation asked for: still receives, and a mount made
    // inside (by root of the user namespace) never reaches the host.
    let got = propagation_round(&ctd, RUND_RUNTIME, "rslave-userns", None, &[], true);
    assert_eq!(got, (true, false), "rund in a user namespace");
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}

/// With a user namespace a container's mounts must never reach the host: shared propagation
/// is refused at Create, naming the cause.
#[test]
fn shared_propagation_is_refused_in_a_user_namespace() {
    let Some(ctd) = start("shared_propagation_is_refused_in_a_user_namespace") else {
        return;
    };
    let before = LeakSnapshot::take(&ctd);
    let vol = ctd.dir.join("uvol");
    std::fs::create_dir(&vol).unwrap();
    for (id, root, opt) in [
        ("u-root", "rshared", "rslave"),
        ("u-bind", "rslave", "rshared"),
    ] {
        let mut spec = sh(&ctd, id, "true");
        set_annotation(&mut spec, "rund.io/userns", "pod");
        spec["linux"]["rootfsPropagation"] = json!(root);
        add_mount(
            &mut spec,
            json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind", opt]}),
        );
        let out = run(&ctd, RUND_RUNTIME, id, &spec);
        assert!(!out.success(), "{id}: {out:?}");
        assert!(
            out.stderr.contains("user namespace") && out.stderr.contains("rshared"),
            "{id}: {}",
            out.stderr
        );
    }
    assert_no_leaks_within(&ctd, &before, Duration::from_secs(15));
}
