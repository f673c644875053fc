use super::*;

fn spec(linux: &str, annotations: &str) -> Spec {
    let text = format!(
        r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"linux":{{{linux}}},"annotations":{{{annotations}}}}}"#
    );
    crate::spec::parse(text.as_bytes()).unwrap()
}

fn requested() -> UsernsConfig {
    UsernsConfig::default()
}

fn always() -> UsernsConfig {
    UsernsConfig {
        mode: RemapMode::Always,
        ..Default::default()
    }
}

fn mode(s: &Spec, cfg: &UsernsConfig) -> (UsernsMode, bool) {
    let d = decide(s, cfg, false).unwrap();
    (d.mode, d.by_mode)
}

#[test]
fn requested_remaps_only_pods_that_ask() {
    let plain = spec("", "");
    assert_eq!(mode(&plain, &requested()), (UsernsMode::Off, false));
    let pod = spec("", r#""rund.io/userns":"pod""#);
    assert_eq!(mode(&pod, &requested()), (UsernsMode::Allocate, false));
    let user_ns = spec(r#""namespaces":[{"type":"user"}]"#, "");
    assert_eq!(mode(&user_ns, &requested()), (UsernsMode::Allocate, false));
    assert!(pod_asks(&pod) && pod_asks(&user_ns) && !pod_asks(&plain));
    // "host" is what such a pod gets anyway: no policy needed.
    let host = spec("", r#""rund.io/userns":"host""#);
    assert_eq!(mode(&host, &requested()), (UsernsMode::Off, false));
}

#[test]
fn always_remaps_every_pod_and_host_needs_the_policy() {
    assert_eq!(mode(&spec("", ""), &always()), (UsernsMode::Allocate, true));
    let pod = spec("", r#""rund.io/userns":"pod""#);
    assert_eq!(mode(&pod, &always()), (UsernsMode::Allocate, false));
    let host = spec("", r#""rund.io/userns":"host""#);
    let e = decide(&host, &always(), false).unwrap_err();
    let msg = e.to_string();
    assert!(
        e.is_refused()
            && msg.contains("rund.io/userns=\"host\"")
            && msg.contains("[policy] allow_userns_host")
            && msg.contains("mode = \"always\""),
        "{msg}"
    );
    assert_eq!(
        decide(&host, &always(), true).unwrap().mode,
        UsernsMode::Off
    );
}

#[test]
fn annotations() {
    let s = spec(
        "",
        r#""rund.io/userns":"host","rund.io/userns-binds":"plain""#,
    );
    assert_eq!(
        decide(&s, &always(), true).unwrap(),
        UsernsDecision {
            mode: UsernsMode::Off,
            binds: BindsMode::Plain,
            by_mode: false,
        }
    );
    let e = decide(&spec("", r#""rund.io/userns":"private""#), &always(), true).unwrap_err();
    let msg = e.to_string();
    assert!(
        e.is_bad_input() && msg.contains("rund.io/userns:") && msg.contains("\"pod\""),
        "{msg}"
    );
    let e = decide(
        &spec("", r#""rund.io/userns-binds":"chown""#),
        &always(),
        true,
    )
    .unwrap_err();
    assert!(e.to_string().contains("rund.io/userns-binds"), "{e}");
    let s = spec(
        r#""namespaces":[{"type":"user"}]"#,
        r#""rund.io/userns":"host""#,
    );
    assert!(decide(&s, &always(), true)
        .unwrap_err()
        .to_string()
        .contains("contradicts"));
}

#[test]
fn spec_mappings_are_honoured_and_validated() {
    let maps = r#""uidMappings":[{"containerID":0,"hostID":500000,"size":65536}],
                  "gidMappings":[{"containerID":0,"hostID":600000,"size":65536}]"#;
    let d = decide(&spec(maps, ""), &requested(), false).unwrap();
    let m = |h| {
        vec![IdMapping {
            container_id: 0,
            host_id: h,
            size: 65536,
        }]
    };
    assert_eq!(
        d.mode,
        UsernsMode::FromSpec {
            uid: m(500000),
            gid: m(600000)
        }
    );
    assert!(!d.by_mode);

    let overlapping = r#""uidMappings":[{"containerID":0,"hostID":500000,"size":10},{"containerID":5,"hostID":700000,"size":10}],
                         "gidMappings":[{"containerID":0,"hostID":600000,"size":1}]"#;
    let e = decide(&spec(overlapping, ""), &always(), false).unwrap_err();
    assert!(
        e.is_bad_input() && e.to_string().contains("linux.uidMappings[1]"),
        "{e}"
    );
    let zero = r#""uidMappings":[{"containerID":0,"hostID":1,"size":0}],"gidMappings":[{"containerID":0,"hostID":1,"size":1}]"#;
    assert!(decide(&spec(zero, ""), &always(), false)
        .unwrap_err()
        .to_string()
        .contains("size 0"));
    let half = r#""uidMappings":[{"containerID":0,"hostID":1,"size":1}]"#;
    assert!(decide(&spec(half, ""), &always(), false)
        .unwrap_err()
        .to_string()
        .contains("linux.gidMappings is empty"));
    let join = r#""namespaces":[{"type":"user","path":"/proc/1/ns/user"}]"#;
    assert!(decide(&spec(join, ""), &always(), false)
        .unwrap_err()
        .to_string()
        .contains("/proc/1/ns/user"));
    // containerd 2.x's pinned pod namespace: joined, with the maps it must have.
    let pinned = r#""namespaces":[{"type":"user","path":"/run/pinned/user"}],"uidMappings":[{"containerID":0,"hostID":65536,"size":65536}],"gidMappings":[{"containerID":0,"hostID":65536,"size":65536}]"#;
    assert!(matches!(
        decide(&spec(pinned, ""), &always(), false).unwrap().mode,
        UsernsMode::FromSpec { .. }
    ));
}
