use super::*;
use oci_spec::runtime::{ProcessBuilder, Spec, SpecBuilder};
use std::path::Path;

fn name(s: &str) -> CdiName {
    CdiName::parse(s).unwrap()
}

fn spec() -> Spec {
    let process = ProcessBuilder::default()
        .env(vec!["PATH=/bin".to_string()])
        .build()
        .unwrap();
    SpecBuilder::default().process(process).build().unwrap()
}

const VENDOR_YAML: &str = r#"
cdiVersion: "0.6.0"
kind: "vendor.example/dev"
containerEdits:
  env: ["VENDOR_GLOBAL=1"]
  hooks:
    - hookName: createContainer
      path: /usr/bin/vendor-hook
      args: ["vendor-hook", "update"]
devices:
  - name: "a"
    containerEdits:
      env: ["DEV=a"]
      deviceNodes:
        - path: /dev/vendor-a
          type: c
          major: 240
          minor: 1
      mounts:
        - hostPath: /opt/vendor/lib
          containerPath: /usr/local/vendor
          options: ["ro", "bind"]
  - name: "b"
    containerEdits:
      deviceNodes:
        - path: /dev/vendor-b
          hostPath: /host/dev/vendor-b
          type: c
          major: 240
          minor: 2
"#;

fn write(dir: &Path, file: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(file), body).unwrap();
}

#[test]
fn load_resolve_apply() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "vendor.yaml", VENDOR_YAML);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    assert_eq!(
        reg.names(),
        ["vendor.example/dev=a", "vendor.example/dev=b"]
    );

    let resolved = reg
        .resolve(&[name("vendor.example/dev=a"), name("vendor.example/dev=b")])
        .unwrap();
    let mut s = spec();
    let nodes = apply_cdi(&mut s, &resolved).unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1].host_path, Path::new("/host/dev/vendor-b"));
    assert_eq!(
        nodes[0].host_path,
        Path::new("/dev/vendor-a"),
        "hostPath defaults to path"
    );

    let env = s.process().as_ref().unwrap().env().clone().unwrap();
    assert!(env.contains(&"VENDOR_GLOBAL=1".to_string()), "{env:?}");
    assert!(env.contains(&"DEV=a".to_string()), "{env:?}");
    assert_eq!(
        env.iter()
            .filter(|e| e.starts_with("VENDOR_GLOBAL"))
            .count(),
        1
    );

    let linux = s.linux().as_ref().unwrap();
    let devs = linux.devices().clone().unwrap();
    let paths: Vec<_> = devs
        .iter()
        .map(|d| d.path().display().to_string())
        .collect();
    assert_eq!(paths, ["/dev/vendor-a", "/dev/vendor-b"]);
    assert_eq!((devs[1].major(), devs[1].minor()), (240, 2));
    let rules = linux
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap();
    assert!(rules
        .iter()
        .any(|r| r.allow() && r.major() == Some(240) && r.minor() == Some(1)));

    let mounts = s.mounts().clone().unwrap();
    assert!(mounts
        .iter()
        .any(|m| m.destination() == Path::new("/usr/local/vendor")
            && m.source().as_deref() == Some(Path::new("/opt/vendor/lib"))));
    let hooks = s
        .hooks()
        .as_ref()
        .unwrap()
        .create_container()
        .clone()
        .unwrap();
    assert_eq!(hooks.len(), 1, "spec-wide hook once even for two devices");
    assert_eq!(hooks[0].path(), Path::new("/usr/bin/vendor-hook"));
}

#[test]
fn unknown_device_lists_known_and_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "vendor.yaml", VENDOR_YAML);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    let err = reg.resolve(&[name("vendor.example/dev=zzz")]).unwrap_err();
    assert!(matches!(err, DeviceError::UnknownCdiDevice { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("vendor.example/dev=a") && msg.contains(&tmp.path().display().to_string()),
        "{msg}"
    );
}

#[test]
fn bad_spec_is_reported_when_its_device_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "broken.json",
        "{\"cdiVersion\": \"0.6.0\", \"kind\": \"x.io/y\", \"devices\": [{}]}",
    );
    write(tmp.path(), "ignored.txt", "not a spec");
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    assert_eq!(reg.errors.len(), 1, "{:?}", reg.errors);
    let err = reg.resolve(&[name("x.io/y=z")]).unwrap_err().to_string();
    assert!(err.contains("broken.json"), "{err}");
}

#[test]
fn later_dir_overrides_and_same_dir_conflicts() {
    let tmp = tempfile::tempdir().unwrap();
    let (etc, run) = (tmp.path().join("etc"), tmp.path().join("run"));
    write(&etc, "v.yaml", VENDOR_YAML);
    write(&run, "v.yaml", &VENDOR_YAML.replace("minor: 1", "minor: 9"));
    let reg = CdiRegistry::load(&[etc.clone(), run.clone()]);
    let r = reg.resolve(&[name("vendor.example/dev=a")]).unwrap();
    let mut s = spec();
    apply_cdi(&mut s, &r).unwrap();
    let devs = s.linux().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(devs[0].minor(), 9, "/var/run/cdi wins over /etc/cdi");

    write(&etc, "w.yaml", VENDOR_YAML);
    let reg = CdiRegistry::load(&[etc]);
    let err = reg
        .resolve(&[name("vendor.example/dev=a")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("several specs"), "{err}");
}

#[test]
fn apply_failure_leaves_spec_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    // No major and a host node that does not exist: the crate must stat it and fail.
    let body = r#"{"cdiVersion":"0.5.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"deviceNodes":[{"path":"/dev/does-not-exist-rund"}]}}]}"#;
    write(tmp.path(), "y.json", body);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    let r = reg.resolve(&[name("x.io/y=z")]).unwrap();
    let mut s = spec();
    let before = serde_json::to_value(&s).unwrap();
    let err = apply_cdi(&mut s, &r).unwrap_err();
    assert!(matches!(err, DeviceError::CdiApply { .. }), "{err}");
    assert_eq!(serde_json::to_value(&s).unwrap(), before);
}

#[test]
fn conversion_keeps_the_rest_of_the_spec() {
    let tmp = tempfile::tempdir().unwrap();
    let body = r#"{"cdiVersion":"0.5.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"env":["Z=1"]}}]}"#;
    write(tmp.path(), "y.json", body);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    let r = reg.resolve(&[name("x.io/y=z")]).unwrap();
    // The full default spec: mounts, namespaces, masked paths, capabilities, rlimits.
    let mut s = Spec::default();
    let mut before = serde_json::to_value(&s).unwrap();
    apply_cdi(&mut s, &r).unwrap();
    let mut after = serde_json::to_value(&s).unwrap();
    let env = after["process"]["env"].as_array().unwrap().clone();
    assert_eq!(env.last().unwrap(), "Z=1");
    before["process"]["env"] = serde_json::Value::Null;
    after["process"]["env"] = serde_json::Value::Null;
    // Capabilities are sets (HashSet order); compare them as sorted lists.
    for v in [&mut before, &mut after] {
        for (_, list) in v["process"]["capabilities"].as_object_mut().unwrap() {
            list.as_array_mut().unwrap().sort_by_key(|x| x.to_string());
        }
    }
    assert_eq!(before, after);
}

/// Loads one spec file and returns its load error (the registry keeps it for the asker).
fn load_error(file: &str, body: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), file, body);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    assert_eq!(
        reg.errors.len(),
        1,
        "{file} must not load: {:?}",
        reg.names()
    );
    let msg = reg.errors[0].to_string();
    assert!(msg.contains(file), "the error names the file: {msg}");
    msg
}

#[test]
fn invalid_specs_name_the_file_and_the_field() {
    let dev = r#""devices":[{"name":"z","containerEdits":{"env":["Z=1"]}}]"#;
    let cases: &[(&str, String, &[&str])] = &[
        (
            "version.json",
            format!(r#"{{"cdiVersion":"0.9.9","kind":"x.io/y",{dev}}}"#),
            &["cdiVersion", "0.9.9"],
        ),
        (
            "old.json",
            r#"{"cdiVersion":"0.4.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"deviceNodes":[{"path":"/dev/z","hostPath":"/dev/null"}]}}]}"#.into(),
            &["cdiVersion", "hostPath", "0.5.0"],
        ),
        (
            "kind.json",
            format!(r#"{{"cdiVersion":"0.6.0","kind":"x.io",{dev}}}"#),
            &["kind", "x.io"],
        ),
        (
            "nodevs.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[]}"#.into(),
            &["devices", "no devices"],
        ),
        (
            "dup.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"env":["A=1"]}},{"name":"z","containerEdits":{"env":["B=1"]}}]}"#.into(),
            &["devices[1].name", "twice"],
        ),
        (
            "badname.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"a b","containerEdits":{"env":["A=1"]}}]}"#.into(),
            &["devices[0].name"],
        ),
        (
            "env.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"env":["=1"]}}]}"#.into(),
            &["devices[0].containerEdits.env[0]"],
        ),
        (
            "type.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"deviceNodes":[{"path":"/dev/z","type":"x"}]}}]}"#.into(),
            &["devices[0].containerEdits.deviceNodes[0].type"],
        ),
        (
            "hook.json",
            format!(r#"{{"cdiVersion":"0.6.0","kind":"x.io/y","containerEdits":{{"hooks":[{{"hookName":"later","path":"/x"}}]}},{dev}}}"#),
            &["containerEdits.hooks[0].hookName", "later"],
        ),
        (
            "mount.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"mounts":[{"hostPath":"","containerPath":"/x"}]}}]}"#.into(),
            &["devices[0].containerEdits.mounts[0].hostPath"],
        ),
        (
            "empty.json",
            r#"{"cdiVersion":"0.6.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{}}]}"#.into(),
            &["devices[0].containerEdits", "empty"],
        ),
        (
            "rdt.json",
            r#"{"cdiVersion":"0.7.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"intelRdt":{"closID":"a"}}}]}"#.into(),
            &["intelRdt", "not supported by rund"],
        ),
        (
            "typo.yaml",
            "cdiVersion: \"0.6.0\"\nkind: x.io/y\ndevices:\n  - name: z\n    containerEdits:\n      deviceNode: []\n".into(),
            &["devices[0].containerEdits", "unknown field `deviceNode`"],
        ),
        (
            "missing.yaml",
            "cdiVersion: \"0.6.0\"\nkind: x.io/y\ndevices:\n  - containerEdits:\n      env: [A=1]\n".into(),
            &["devices[0]", "missing field `name`"],
        ),
    ];
    for (file, body, needles) in cases {
        let msg = load_error(file, body);
        for n in *needles {
            assert!(msg.contains(n), "{file}: {n:?} not in {msg}");
        }
    }
}

#[test]
fn every_known_version_loads_and_additional_gids_apply() {
    for v in VERSIONS {
        let tmp = tempfile::tempdir().unwrap();
        let body = format!(
            r#"{{"cdiVersion":"{v}","kind":"x.io/y","devices":[{{"name":"z","containerEdits":{{"env":["Z=1"]}}}}]}}"#
        );
        write(tmp.path(), "v.json", &body);
        let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
        assert!(reg.errors.is_empty(), "{v}: {:?}", reg.errors);
    }
    let tmp = tempfile::tempdir().unwrap();
    let body = r#"{"cdiVersion":"0.7.0","kind":"x.io/y","devices":[{"name":"z","containerEdits":{"additionalGids":[0,44,44],"env":["PATH=/cdi"]}}]}"#;
    write(tmp.path(), "g.json", body);
    let reg = CdiRegistry::load(&[tmp.path().to_path_buf()]);
    let r = reg.resolve(&[name("x.io/y=z")]).unwrap();
    let mut s = spec();
    apply_cdi(&mut s, &r).unwrap();
    let p = s.process().as_ref().unwrap();
    assert_eq!(p.user().additional_gids().clone(), Some(vec![44]));
    assert_eq!(
        p.env().clone().unwrap(),
        ["PATH=/cdi"],
        "same name replaced"
    );
}
