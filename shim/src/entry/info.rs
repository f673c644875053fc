//! `-info`: containerd 2.x runs the shim with it (runtime options on stdin) to
//! learn the runtime's name, version and OCI features before it creates a
//! task whose spec asks for idmapped mounts (CRI does for `hostUsers: false`
//! pods). It prints a `containerd.types.RuntimeInfo` protobuf on stdout.

use containerd_shim_protos::protobuf::CodedOutputStream;

/// The OCI runtime features document's type, as containerd registers it.
const FEATURES_TYPE_URL: &str =
    "types.containerd.io/opencontainers/runtime-spec/1/features/Features";

/// What rund can do of the runtime spec's optional features. Binds in a pod
/// with a user namespace are idmapped with the pod's map (a mount whose own
/// mappings differ from it is refused at Create).
fn features() -> serde_json::Value {
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.1.0",
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
            "mountExtensions": {"idmap": {"enabled": true}},
        },
    })
}

use super::error::EntryError;

type WireResult = containerd_shim_protos::protobuf::Result<()>;

fn message(
    f: impl FnOnce(&mut CodedOutputStream<'_>) -> WireResult,
) -> Result<Vec<u8>, EntryError> {
    let mut v = Vec::new();
    {
        let mut out = CodedOutputStream::vec(&mut v);
        f(&mut out).map_err(EntryError::Encode)?;
        out.flush().map_err(EntryError::Encode)?;
    }
    Ok(v)
}

/// The RuntimeInfo bytes: name (1), version (2: version 1, revision 2) and
/// features (4: an Any of the JSON document). Options (3) are not echoed:
/// rund reads only `ConfigPath` from them.
pub fn runtime_info() -> Result<Vec<u8>, EntryError> {
    let version = message(|o| o.write_string(1, env!("CARGO_PKG_VERSION")))?;
    let doc = features().to_string().into_bytes();
    let any = message(|o| {
        o.write_string(1, FEATURES_TYPE_URL)?;
        o.write_bytes(2, &doc)
    })?;
    message(|o| {
        o.write_string(1, crate::cli::install::snippet::RUNTIME_TYPE)?;
        o.write_bytes(2, &version)?;
        o.write_bytes(4, &any)
    })
}

pub fn run() -> Result<(), EntryError> {
    use std::io::Write;
    // The options on stdin are not needed: drain nothing, answer at once.
    let bytes = runtime_info()?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(EntryError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protowire;

    #[test]
    fn runtime_info_names_rund_and_idmap_support() {
        let b = runtime_info().unwrap();
        let (mut name, mut features) = (String::new(), Vec::new());
        protowire::fields("info", &b, |n, v| {
            match n {
                1 => name = v.string("info")?,
                4 => features = v.bytes("info")?.to_vec(),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(name, crate::cli::install::snippet::RUNTIME_TYPE);
        let (mut url, mut doc) = (String::new(), Vec::new());
        protowire::fields("any", &features, |n, v| {
            match n {
                1 => url = v.string("any")?,
                2 => doc = v.bytes("any")?.to_vec(),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(url, FEATURES_TYPE_URL);
        let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(doc["linux"]["mountExtensions"]["idmap"]["enabled"], true);
    }
}
