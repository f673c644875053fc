//! CDI spec files (`/etc/cdi`, `/var/run/cdi`): loaded by rund's
//! `CdiRegistry` (which parses them with the container-device-interface
//! crate), resolved by name and applied to a container's spec.

use std::path::PathBuf;
use std::sync::OnceLock;

use oci_spec::runtime::Spec;
use rund_devices::cdi::{apply_cdi, CdiRegistry};
use rund_devices::select::CdiName;
use tempfile::TempDir;

use crate::grammar::is_cdi_name;

fn dir() -> &'static TempDir {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let mut b = tempfile::Builder::new();
        b.prefix("rund-fuzz-cdi");
        if shm.is_dir() {
            b.tempdir_in(shm)
        } else {
            b.tempdir()
        }
        .expect("temp dir")
    })
}

fn container_spec() -> Spec {
    rund_shim::spec::parse(
        br#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/sh"],
        "cwd":"/","env":["PATH=/bin"]},"root":{"path":"rootfs"},
        "mounts":[{"destination":"/proc","type":"proc","source":"proc"}],
        "linux":{"namespaces":[{"type":"pid"},{"type":"mount"}]}}"#,
    )
    .expect("base spec")
}

pub fn run(data: &[u8]) {
    let dir = dir().path().to_path_buf();
    let file = dir.join("fuzz.yaml");
    std::fs::write(&file, data).expect("write spec file");
    let reg = CdiRegistry::load(std::slice::from_ref(&dir));
    let names = reg.names();
    if !reg.errors.is_empty() {
        assert!(
            names.is_empty(),
            "a refused file still gave devices {names:?}"
        );
        return;
    }
    let mut wanted = Vec::new();
    for name in &names {
        // The CDI crate allows '.' in a class, rund's names do not.
        let Ok(n) = CdiName::parse(name) else {
            let class = name.split_once('/').and_then(|(_, r)| r.split_once('='));
            assert!(
                class.is_some_and(|(c, _)| c.contains('.')),
                "{name:?} unnameable"
            );
            continue;
        };
        assert!(is_cdi_name(name), "{name:?}");
        assert_eq!(&n.to_string(), name);
        wanted.push(n);
    }
    let resolved = reg.resolve(&wanted).expect("listed names resolve");
    assert_eq!(resolved.len(), wanted.len());
    let base = container_spec();
    let mut spec = base.clone();
    match apply_cdi(&mut spec, &resolved) {
        Err(_) => assert_eq!(spec, base, "a failed apply changed the spec"),
        Ok(nodes) => {
            // The edited spec still travels to the agent as JSON.
            let wire = serde_json::to_vec(&spec).expect("serialises");
            assert_eq!(rund_shim::spec::parse(&wire).expect("parses"), spec);
            for n in nodes {
                assert!(!n.path.is_empty() && n.host_path != PathBuf::new(), "{n:?}");
            }
        }
    }
}
