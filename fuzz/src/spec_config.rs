//! `config.json`: what Create reads first. The spec is parsed, checked and
//! the facts the shim derives from it (role, pod grouping, namespace plans,
//! init, grace) must agree with the spec's own fields.

use std::collections::HashSet;

use oci_spec::runtime::{LinuxNamespaceType, Spec};
use rund_shim::spec::namespaces::{request, sandbox_namespaces, NsRequest, KINDS};
use rund_shim::spec::{self, Role};

fn ann<'a>(spec: &'a Spec, key: &str) -> Option<&'a str> {
    spec.annotations().as_ref()?.get(key).map(String::as_str)
}

fn ns_types(spec: &Spec) -> Vec<LinuxNamespaceType> {
    spec.linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default()
        .iter()
        .map(|n| n.typ())
        .collect()
}

pub fn run(data: &[u8]) {
    let Ok(spec) = spec::parse(data) else {
        return;
    };
    // The shim sends the spec to the agent as JSON: the agent must read
    // back exactly what the shim checked.
    let wire = serde_json::to_vec(&spec).expect("a parsed spec serialises");
    let back = spec::parse(&wire).expect("a serialised spec parses");
    assert_eq!(back, spec, "spec changed across a JSON round trip");

    if spec::check_supported(&spec).is_ok() {
        let p = spec.process().as_ref().expect("supported: process");
        assert!(p.args().as_ref().is_some_and(|a| !a.is_empty()));
        assert!(spec.root().is_some());
        // runc refuses a namespace type listed twice; so must rund.
        let types = ns_types(&spec);
        let unique: HashSet<_> = types.iter().collect();
        assert_eq!(unique.len(), types.len(), "duplicate namespace accepted");
    }

    let (ctype, sid) = (
        ann(&spec, rund_annotations::CRI_CONTAINER_TYPE),
        ann(&spec, rund_annotations::CRI_SANDBOX_ID),
    );
    match spec::role(&spec) {
        Role::PodSandbox => assert_eq!(ctype, Some("sandbox")),
        Role::PodContainer { sandbox_id } => {
            assert!(ctype.is_some_and(|t| t != "sandbox"));
            assert_eq!(Some(sandbox_id.as_str()), sid);
        }
        Role::Standalone => assert!(ctype.is_none() || (ctype != Some("sandbox") && sid.is_none())),
    }
    assert_eq!(spec::grouping_id(&spec, "cid"), sid.unwrap_or("cid"));

    for kind in KINDS.iter().chain(&["user", "mnt"]) {
        if let Ok(NsRequest::Join(p)) = request(&spec, kind) {
            assert!(p.is_absolute() && p.as_os_str().len() > 1, "{p:?}");
        }
    }
    if let Ok(sb) = sandbox_namespaces(&spec) {
        let types = ns_types(&spec);
        assert!(!types.contains(&LinuxNamespaceType::Time));
        assert_eq!(sb.userns, types.contains(&LinuxNamespaceType::User));
        assert_eq!(sb.host_pid, !types.contains(&LinuxNamespaceType::Pid));
        let mut seen = HashSet::new();
        for (kind, path) in &sb.join {
            assert!(["net", "ipc", "uts"].contains(&kind.as_str()), "{kind}");
            assert!(path.is_absolute(), "{path:?}");
            assert!(seen.insert(kind.clone()), "{kind} joined twice");
            let new = match kind.as_str() {
                "net" => sb.new_net,
                "ipc" => sb.new_ipc,
                _ => sb.new_uts,
            };
            assert!(!new, "{kind} both new and joined");
        }
    }

    for enabled in [false, true] {
        let skip = ["tini".to_string()];
        match (
            ann(&spec, rund_annotations::INIT),
            spec::use_init(&spec, enabled, &skip),
        ) {
            (Some("true"), r) => assert!(r.unwrap()),
            (Some("false"), r) => assert!(!r.unwrap()),
            (Some(_), r) => assert!(r.unwrap_err().to_string().contains(rund_annotations::INIT)),
            (None, r) => assert!(!r.unwrap() || enabled),
        }
    }
    match (
        ann(&spec, rund_annotations::GRACE_PERIOD),
        spec::grace_seconds(&spec),
    ) {
        (None, r) => assert!(r.unwrap().is_none()),
        (Some(v), Ok(n)) => assert_eq!(v.parse::<u32>().ok(), n),
        (Some(v), Err(e)) => {
            assert!(v.parse::<u32>().is_err());
            assert!(e.to_string().contains(rund_annotations::GRACE_PERIOD));
        }
    }
}
