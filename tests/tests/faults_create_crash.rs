//! Fault suite, the shim killed in the middle of Create, at each named phase. The shim's test
//! hook `RUND_FAILPOINT=create:<phase>@<id>` (set on containerd, which passes its environment
//! to shims) makes it SIGKILL itself there, so no timing luck is involved. containerd then runs
//! `containerd-shim-rund-v2 delete`, which must leave nothing: no mount (the rootfs, idmapped
//! lower layers staged in the bundle), process, cgroup, lease, pool slot or state file; and the
//! next Create, in a new pod, works. Every pod is remapped, so leases are in play. The same
//! holds when the shim panics there (`panic:create:<phase>@<id>`), and the panic is in the log.

use rund_tests::faults::{FaultEnv, GRACE};
use rund_tests::{ContainerdOpts, RunSpec};

const FAILPOINT_ENV: &str = "RUND_FAILPOINT";
const USERNS: &str = "[userns]\nmode = \"always\"\n";

/// Runs `v-<phase>` with the failpoint armed for it alone, then checks the clean-up and that
/// `n-<phase>` runs. `image`: an overlay image rootfs (its lowers are idmapped and staged).
fn crash_at(phase: &str, image: bool) {
    crash_in(phase, image, "", "");
}

/// [`crash_at`] with `config` added to rund's (`mode` names the test).
fn crash_in(phase: &str, image: bool, mode: &str, config: &str) {
    crash_as(Crash::Killed, phase, image, mode, config);
}

/// How the shim dies at the failpoint.
#[derive(Clone, Copy, PartialEq)]
enum Crash {
    Killed,
    /// A panic: its message must reach containerd's log (the server's stderr is /dev/null),
    /// and the shim must abort, as a release build does.
    Panicked,
}

fn crash_as(crash: Crash, phase: &str, image: bool, mode: &str, config: &str) {
    let (how, action) = match crash {
        Crash::Killed => ("killed", ""),
        Crash::Panicked => ("panicked", "panic:"),
    };
    let test = format!("shim_{how}_at_create_{phase}{mode}");
    let victim = format!("v-{phase}");
    let opts = ContainerdOpts {
        env: vec![(
            FAILPOINT_ENV.into(),
            format!("{action}create:{phase}@{victim}"),
        )],
        ..ContainerdOpts::new()
    };
    let Some(env) = FaultEnv::start(&test, opts, "", &format!("{USERNS}{config}")) else {
        return;
    };
    let image_ref = image.then(|| {
        env.ctd
            .import_busybox_image(&env.ctd.namespace)
            .expect("import image")
    });
    let spec = |id: &str, args: &[&str], detach: bool| {
        let s = env.spec(id, args);
        match image_ref {
            Some(i) => RunSpec {
                image: Some(i.into()),
                rootfs: None,
                detach,
                ..s
            },
            None => RunSpec { detach, ..s },
        }
    };
    let before = env.leftovers(&[]);

    let out = env
        .ctd
        .run_spec(&spec(&victim, &["sleep", "100000"], true))
        .unwrap();
    assert!(!out.success(), "the shim died: Create must fail: {out:?}");
    // A per-node shim logs to the node's file.
    let log = std::fs::read_to_string(&env.ctd.log).unwrap_or_default()
        + &rund_tests::pernode::node_logs_in(&env.state);
    assert!(
        log.contains(&format!("failpoint create:{phase}")),
        "the shim died at {phase}, not elsewhere: {out:?}\n{}",
        env.ctd.log_tail(40)
    );
    if crash == Crash::Panicked {
        let line = log
            .lines()
            .find(|l| l.contains("panicked at"))
            .unwrap_or_else(|| panic!("no panic in the log:\n{}", env.ctd.log_tail(40)));
        assert!(
            line.contains("rund shim ")
                && line.contains(&format!(
                    "failpoint create:{phase}: a panic in Create of {victim}"
                ))
                && line.ends_with("; aborting"),
            "the panic's thread, place and message, then the abort: {line}"
        );
    }
    env.ctd
        .wait_for_status(&victim, "absent", GRACE)
        .expect("no task is left");
    env.ctd.container_delete(&victim).unwrap().check().unwrap();
    env.assert_clean(&before);

    let next = format!("n-{phase}");
    let out = env
        .ctd
        .run_spec(&spec(&next, &["echo", "next"], false))
        .unwrap();
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "next\n"),
        "the next Create works: {out:?}"
    );
    env.assert_clean(&before);
    let pool = env.pool_status();
    assert_eq!(pool["claimed"], 0, "{pool}");
}

#[test]
fn shim_killed_at_create_reserved() {
    crash_at("reserved", false);
}

#[test]
fn shim_killed_at_create_sandbox() {
    crash_at("sandbox", false);
}

#[test]
fn shim_killed_at_create_rootfs() {
    crash_at("rootfs", true);
}

#[test]
fn shim_killed_at_create_lowers() {
    crash_at("lowers", true);
}

#[test]
fn shim_killed_at_create_cgroup() {
    crash_at("cgroup", false);
}

#[test]
fn shim_killed_at_create_agent() {
    crash_at("agent", false);
}

#[test]
fn shim_killed_at_create_placed() {
    crash_at("placed", false);
}

/// A panic in Create (a bug, not a kill): logged where containerd keeps the shim's log, the
/// shim aborts, and containerd's clean-up leaves nothing, as after a kill.
#[test]
fn shim_panicked_at_create_rootfs() {
    crash_as(Crash::Panicked, "rootfs", true, "", "");
}

#[test]
fn shim_panicked_at_create_agent() {
    crash_as(Crash::Panicked, "agent", false, "", "");
}

const PER_NODE: &str = "[shim]\nmode = \"per-node\"\n";

/// Per-node mode: the node shim dies in the first Create of a pod; the keeper starts the next
/// one, which has no record of that pod and lets it go, and containerd's clean-up must still
/// leave nothing.
#[test]
fn node_shim_killed_at_create_sandbox() {
    crash_in("sandbox", false, "_per_node", PER_NODE);
}

#[test]
fn node_shim_killed_at_create_agent() {
    crash_in("agent", false, "_per_node", PER_NODE);
}
