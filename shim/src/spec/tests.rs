use super::*;

fn spec_json(extra: &str) -> Vec<u8> {
    format!(
        r#"{{"ociVersion":"1.0.2","process":{{"user":{{"uid":0,"gid":0}},"args":["/bin/true"],"cwd":"/"}},
        "root":{{"path":"rootfs"}}{extra}}}"#
    )
    .into_bytes()
}

#[test]
fn malformed_json_is_a_clear_error() {
    let e = parse(b"{not json").unwrap_err();
    assert!(e.to_string().starts_with("config.json is malformed"), "{e}");
}

#[test]
fn minimal_spec_is_supported() {
    let s = parse(&spec_json("")).unwrap();
    check_supported(&s).unwrap();
    assert_eq!(role(&s), Role::Standalone);
    assert_eq!(grouping_id(&s, "c1"), "c1");
    assert!(use_init(&s, true, &[]).unwrap());
    assert!(!use_init(&s, false, &[]).unwrap());
    assert!(
        !use_init(&s, true, &["true".into()]).unwrap(),
        "args[0] /bin/true is an init by config"
    );
}

#[test]
fn unsupported_fields_are_named() {
    let s = parse(&spec_json(r#","linux":{"intelRdt":{"closID":"x"}}"#)).unwrap();
    let e = check_supported(&s).unwrap_err();
    assert!(e.to_string().contains("linux.intelRdt"), "{e}");
    let s = parse(
        br#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["x"],"cwd":"/","apparmorProfile":"p"},"root":{"path":"r"}}"#,
    )
    .unwrap();
    let e = check_supported(&s).unwrap_err();
    assert!(e.to_string().contains("process.apparmorProfile"), "{e}");
}

/// A namespace type listed twice is refused, as runc does (the fuzz
/// target's invariant caught rund taking the first one silently).
#[test]
fn duplicate_namespaces_are_invalid() {
    let s = parse(&spec_json(
        r#","linux":{"namespaces":[{"type":"network"},{"type":"pid"},{"type":"network","path":"/var/run/netns/x"}]}"#,
    ))
    .unwrap();
    let e = check_supported(&s).unwrap_err();
    assert!(e.to_string().contains("lists net twice"), "{e}");
    let s = parse(&spec_json(
        r#","linux":{"namespaces":[{"type":"network"},{"type":"pid"}]}"#,
    ))
    .unwrap();
    assert!(check_supported(&s).is_ok());
}

#[test]
fn empty_args_are_invalid() {
    let s = parse(br#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":[],"cwd":"/"},"root":{"path":"r"}}"#).unwrap();
    assert!(check_supported(&s).is_err());
}

#[test]
fn cri_roles_and_grouping() {
    let s = parse(&spec_json(
        r#","annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"pod1"}"#,
    ))
    .unwrap();
    assert_eq!(
        role(&s),
        Role::PodContainer {
            sandbox_id: "pod1".into()
        }
    );
    assert_eq!(grouping_id(&s, "c1"), "pod1");
    let s = parse(&spec_json(
        r#","annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-id":"pod1"}"#,
    ))
    .unwrap();
    assert_eq!(role(&s), Role::PodSandbox);
}

#[test]
fn bad_annotations_are_rejected() {
    let s = parse(&spec_json(
        r#","annotations":{"rund.io/init":"maybe","rund.io/grace-period-seconds":"soon"}"#,
    ))
    .unwrap();
    assert!(use_init(&s, true, &[])
        .unwrap_err()
        .to_string()
        .contains("rund.io/init"));
    assert!(grace_seconds(&s)
        .unwrap_err()
        .to_string()
        .contains("grace-period"));
}
