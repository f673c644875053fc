//! CRI conformance, the security context, for both runtime handlers (runc the reference, rund
//! with its default config):
//!
//! - a seccomp profile from a localhost file that denies `mkdir` makes it fail with EPERM, in
//!   the container's own process and in an exec; a container without it can mkdir;
//! - RuntimeDefault seccomp on a container: ExecSync works, and the filter is on;
//! - dropping ALL capabilities leaves CapInh, CapPrm, CapEff, CapBnd and CapAmb zero, for the
//!   container's process and for an exec; a container that drops nothing keeps its bounding set.

use rund_tests::cri::api::{security_profile::ProfileType, SecurityProfile};
use rund_tests::cri::{CriFixture, Handler};
use rund_tests::{per_handler, ContainerSpec, ContainerdOpts, BUSYBOX_IMAGE};

const SLEEPER: &[&str] = &["sleep", "100000"];
const CAP_SETS: [&str; 5] = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"];

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    CriFixture::start(h, test, ContainerdOpts::new())
}

/// `Field:\tvalue` lines of a /proc/<pid>/status text.
fn status_field<'a>(status: &'a str, field: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

fn seccomp_localhost_profile(h: Handler) {
    let Some(mut fx) = start(h, "seccomp_localhost_profile") else {
        return;
    };
    // OCI LinuxSeccomp, as containerd loads a localhost profile.
    let profile = fx.scratch("seccomp").join("deny-mkdir.json");
    let json = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{ "names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO" }],
    });
    std::fs::write(&profile, json.to_string()).unwrap();

    let pod = fx.pod_spec("seccomplocal");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    // The workload's own attempt, recorded for the checks below.
    let script = "mkdir /tmp/byinit 2>/tmp/err; echo $? > /tmp/rc; exec sleep 100000";
    let mut denied = ContainerSpec::new("denied", BUSYBOX_IMAGE, &["sh", "-c", script]);
    denied.seccomp = Some(SecurityProfile {
        profile_type: ProfileType::Localhost as i32,
        localhost_ref: profile.display().to_string(),
    });
    let d = fx
        .run(&pod_id, &denied, &pod)
        .expect("container with profile");
    let rc = fx.wait_until(&d, "test -s /tmp/rc && cat /tmp/rc");
    assert_eq!(
        rc.stdout.trim(),
        "1",
        "{}: mkdir by PID 1: {rc:?}",
        h.name()
    );
    let err = fx.sh_ok(&d, "cat /tmp/err");
    assert!(
        err.contains("Operation not permitted"),
        "{}: {err}",
        h.name()
    );
    let r = fx.exec(&d, &["mkdir", "/tmp/byexec"]);
    assert_ne!(r.code, 0, "{}: mkdir in an exec: {r:?}", h.name());
    assert!(
        r.stderr.contains("Operation not permitted"),
        "{}: EPERM expected: {r:?}",
        h.name()
    );
    let status = fx.sh_ok(&d, "cat /proc/1/status");
    assert_eq!(status_field(&status, "Seccomp"), Some("2"), "{}", h.name());

    let free = ContainerSpec::new("free", BUSYBOX_IMAGE, SLEEPER);
    let f = fx
        .run(&pod_id, &free, &pod)
        .expect("container without profile");
    fx.sh_ok(&f, "mkdir /tmp/free");
    fx.finish();
}

fn seccomp_runtime_default_exec(h: Handler) {
    let Some(mut fx) = start(h, "seccomp_runtime_default_exec") else {
        return;
    };
    let pod = fx.pod_spec("seccompdefault");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut c = ContainerSpec::new("app", BUSYBOX_IMAGE, SLEEPER);
    c.seccomp = Some(SecurityProfile {
        profile_type: ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    });
    let id = fx.run(&pod_id, &c, &pod).expect("RuntimeDefault container");
    let r = fx.exec(
        &id,
        &["sh", "-c", "echo exec-ok; grep Seccomp: /proc/self/status"],
    );
    assert_eq!(r.code, 0, "{}: {r:?}", h.name());
    assert!(r.stdout.starts_with("exec-ok\n"), "{}: {r:?}", h.name());
    assert_eq!(
        status_field(&r.stdout, "Seccomp"),
        Some("2"),
        "{}",
        h.name()
    );
    let one = fx.sh_ok(&id, "cat /proc/1/status");
    assert_eq!(status_field(&one, "Seccomp"), Some("2"), "{}", h.name());
    fx.finish();
}

fn drop_all_capabilities(h: Handler) {
    let Some(mut fx) = start(h, "drop_all_capabilities") else {
        return;
    };
    let pod = fx.pod_spec("dropall");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let mut none = ContainerSpec::new("none", BUSYBOX_IMAGE, SLEEPER);
    none.drop_capabilities = vec!["ALL".into()];
    let n = fx.run(&pod_id, &none, &pod).expect("drop ALL");
    for proc_ in ["self", "1"] {
        let status = fx.sh_ok(&n, &format!("cat /proc/{proc_}/status"));
        for set in CAP_SETS {
            assert_eq!(
                status_field(&status, set),
                Some("0000000000000000"),
                "{}: {set} of /proc/{proc_}",
                h.name()
            );
        }
    }
    // The control: the default set is not empty.
    let dflt = ContainerSpec::new("default", BUSYBOX_IMAGE, SLEEPER);
    let d = fx.run(&pod_id, &dflt, &pod).expect("default caps");
    let status = fx.sh_ok(&d, "cat /proc/1/status");
    let bnd = status_field(&status, "CapBnd").unwrap_or_default();
    assert_ne!(bnd, "0000000000000000", "{}: {status}", h.name());
    fx.finish();
}

per_handler!(
    seccomp_localhost_profile,
    seccomp_runtime_default_exec,
    drop_all_capabilities,
);
