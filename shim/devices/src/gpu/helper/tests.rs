use std::os::unix::fs::PermissionsExt;

use super::*;

/// A stand-in `rund`: saves its request to `request`, then runs `then`.
fn fake_program(dir: &std::path::Path, then: &str) -> PathBuf {
    let p = dir.join("rund");
    let script = format!(
        "#!/bin/sh\n[ \"$1 $2\" = \"helper nvml\" ] || exit 9\ncat > {}/request\n{then}\n",
        dir.display()
    );
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn helper(program: PathBuf, secs: u64) -> NvmlHelper {
    NvmlHelper {
        program,
        deadline: Duration::from_secs(secs),
    }
}

#[test]
fn the_request_is_the_config_and_a_reply_becomes_the_same_error() {
    let dir = tempfile::tempdir().unwrap();
    let reply = r#"{"unavailable":{"library":"/x/libnvidia-ml.so.1","reason":"not found"}}"#;
    let h = helper(
        fake_program(dir.path(), &format!("printf '%s' '{reply}'")),
        30,
    );
    let cfg = DeviceConfig {
        nvml_library: "/x/libnvidia-ml.so.1".into(),
        ..Default::default()
    };
    let e = h.discover(&cfg).unwrap_err();
    assert!(
        matches!(&e, DeviceError::NvmlUnavailable { library, reason }
            if library == "/x/libnvidia-ml.so.1" && reason == "not found"),
        "{e:?}"
    );
    let sent: DeviceConfig =
        serde_json::from_slice(&std::fs::read(dir.path().join("request")).unwrap()).unwrap();
    assert_eq!(sent, cfg);
}

#[test]
fn a_helper_that_crashes_or_hangs_is_a_helper_error_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let h = helper(
        fake_program(dir.path(), "echo 'no libc here' >&2; exit 7"),
        30,
    );
    let e = h
        .discover(&DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no libc here") && e.contains('7'), "{e}");

    let h = helper(fake_program(dir.path(), "exec sleep 1000"), 1);
    let e = h
        .discover(&DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no answer in 1 s"), "{e}");

    let h = helper(dir.path().join("missing"), 1);
    let e = h
        .discover(&DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("GPU discovery helper") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn serve_answers_a_bad_request_and_a_missing_library() {
    let r: NvmlReply = serde_json::from_slice(&serve(b"{not json")).unwrap();
    assert!(
        matches!(&r, NvmlReply::Failed { reason } if reason.contains("bad request")),
        "{r:?}"
    );
    let cfg = DeviceConfig {
        nvml_library: "/nonexistent/libnvidia-ml.so.1".into(),
        ..Default::default()
    };
    let r: NvmlReply = serde_json::from_slice(&serve(&serde_json::to_vec(&cfg).unwrap())).unwrap();
    assert!(
        matches!(&r, NvmlReply::Unavailable { library, .. }
            if library == "/nonexistent/libnvidia-ml.so.1"),
        "{r:?}"
    );
}
