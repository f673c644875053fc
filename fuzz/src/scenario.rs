//! A pod's request as lines of text, one fact a line: readable in the corpus
//! and easy for the fuzzer to mutate. Unknown lines are ignored.
//!
//! ```text
//! ann KEY=VALUE          container annotation
//! pod KEY=VALUE          pod annotation (the sandbox spec's); a bare `pod`
//!                        makes the container a pod member with none
//! env K=V                process.env entry
//! uidmap C H S           linux.uidMappings entry (gidmap likewise)
//! ns TYPE [PATH]         linux.namespaces entry
//! rlimit TYPE SOFT HARD  process.rlimits entry
//! mode always|requested  [userns] mode
//! policy KEY [VALUE]     allow_userns_host, accept_env, max_memlock V,
//!                        max_grace N, gpu X, rdma X, cdi X
//! inherited N            the hard RLIMIT_MEMLOCK the pod inherits
//! default_grace N        grace_period_seconds
//! rdma_default V         [memlock] rdma_default
//! ```

use std::collections::HashMap;

use oci_spec::runtime::Spec;
use rund_shim::config::{RemapMode, UsernsConfig};
use rund_shim::policy::PolicyConfig;
use serde_json::{json, Value};

pub struct Scenario {
    pub spec: Spec,
    /// The pod's annotations; `None` for a standalone container.
    pub pod: Option<HashMap<String, String>>,
    pub userns: UsernsConfig,
    pub policy: PolicyConfig,
    pub inherited: u64,
    pub default_grace: u32,
    pub rdma_default: String,
}

fn kv(s: &str) -> (String, String) {
    match s.split_once('=') {
        Some((k, v)) => (k.to_string(), v.to_string()),
        None => (s.to_string(), String::new()),
    }
}

fn mapping(rest: &str) -> Option<Value> {
    let n: Vec<u32> = rest
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [c, h, s] = n[..] else { return None };
    Some(json!({ "containerID": c, "hostID": h, "size": s }))
}

/// The scenario, or None if it is not one the shim could be given (a spec
/// that does not parse, a policy the config loader refuses).
pub fn parse(data: &[u8]) -> Option<Scenario> {
    let text = String::from_utf8_lossy(data);
    let (mut ann, mut pod_ann) = (serde_json::Map::new(), None::<HashMap<_, _>>);
    let (mut env, mut uid, mut gid) = (vec![], vec![], vec![]);
    let (mut ns, mut rlimits) = (vec![], vec![]);
    let mut userns = UsernsConfig::default();
    let mut policy = PolicyConfig::default();
    let (mut inherited, mut default_grace) = (8u64 << 20, 30u32);
    let mut rdma_default = "unlimited".to_string();
    for line in text.split('\n') {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "ann" => {
                let (k, v) = kv(rest);
                ann.insert(k, Value::String(v));
            }
            "pod" => {
                let map = pod_ann.get_or_insert_with(HashMap::new);
                if !rest.is_empty() {
                    let (k, v) = kv(rest);
                    map.insert(k, v);
                }
            }
            "env" => env.push(rest.to_string()),
            "uidmap" => uid.push(mapping(rest)?),
            "gidmap" => gid.push(mapping(rest)?),
            "ns" => match rest.split_once(' ') {
                Some((t, p)) => ns.push(json!({ "type": t, "path": p })),
                None => ns.push(json!({ "type": rest })),
            },
            "rlimit" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let [t, s, h] = f[..] else { return None };
                let (s, h): (u64, u64) = (s.parse().ok()?, h.parse().ok()?);
                rlimits.push(json!({ "type": t, "soft": s, "hard": h }));
            }
            "mode" => {
                userns.mode = match rest {
                    "always" => RemapMode::Always,
                    _ => RemapMode::Requested,
                }
            }
            "policy" => {
                let (k, v) = rest.split_once(' ').unwrap_or((rest, ""));
                match k {
                    "allow_userns_host" => policy.allow_userns_host = true,
                    "accept_env" => policy.accept_nvidia_visible_devices_env = true,
                    "max_memlock" => policy.max_memlock = Some(v.to_string()),
                    "max_grace" => policy.max_grace_period_seconds = v.parse().ok()?,
                    "gpu" => policy.allowed_gpus.push(v.to_string()),
                    "rdma" => policy.allowed_rdma_devices.push(v.to_string()),
                    "cdi" => policy.allowed_cdi_devices.push(v.to_string()),
                    _ => {}
                }
            }
            "inherited" => inherited = rest.parse().ok()?,
            "default_grace" => default_grace = rest.parse().ok()?,
            "rdma_default" => rdma_default = rest.to_string(),
            _ => {}
        }
    }
    policy.validate().ok()?;
    let mut linux = json!({ "namespaces": ns });
    if !uid.is_empty() {
        linux["uidMappings"] = json!(uid);
    }
    if !gid.is_empty() {
        linux["gidMappings"] = json!(gid);
    }
    let mut process = json!({
        "user": { "uid": 0, "gid": 0 },
        "args": ["/bin/sh"],
        "cwd": "/",
        "env": env,
    });
    if !rlimits.is_empty() {
        process["rlimits"] = json!(rlimits);
    }
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": { "path": "rootfs" },
        "annotations": ann,
        "linux": linux,
    });
    let spec = rund_shim::spec::parse(&serde_json::to_vec(&spec).ok()?).ok()?;
    Some(Scenario {
        spec,
        pod: pod_ann,
        userns,
        policy,
        inherited,
        default_grace,
        rdma_default,
    })
}
