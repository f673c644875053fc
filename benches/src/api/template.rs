//! What the API client sends for a runtime: exactly the container `ctr run`
//! would create. A template container is made once with `ctr container
//! create` (the same flags as the timed `ctr run`) and read back with `ctr
//! container info`; each pod then differs only in its id, its cgroup path
//! (`/<namespace>/<id>`, as ctr sets it) and its argv.

use base64::Engine;
use serde_json::Value;

use super::wire::{Any, Container, ContainerRuntime};
use super::ApiError;

/// containerd's typeurl for an OCI spec.
pub const SPEC_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Spec";

#[derive(Debug, Clone)]
pub struct Template {
    runtime: ContainerRuntime,
    spec: Value,
    namespace: String,
}

impl Template {
    /// From `ctr container info`'s JSON.
    pub fn from_info(info: &str, namespace: &str) -> Result<Template, ApiError> {
        let bad = |what: &str| ApiError::Template(format!("`ctr container info`: {what}"));
        let v: Value = serde_json::from_str(info).map_err(|e| bad(&e.to_string()))?;
        let rt = v.get("Runtime").ok_or_else(|| bad("no Runtime"))?;
        let name = rt
            .get("Name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no Runtime.Name"))?;
        let options = match rt.get("Options") {
            None | Some(Value::Null) => None,
            Some(o) => {
                let type_url = o
                    .get("type_url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("Runtime.Options without type_url"))?;
                let value = match o.get("value").and_then(Value::as_str) {
                    Some(b) => base64::engine::general_purpose::STANDARD
                        .decode(b)
                        .map_err(|e| bad(&format!("Runtime.Options.value: {e}")))?,
                    None => Vec::new(),
                };
                Some(Any {
                    type_url: type_url.into(),
                    value,
                })
            }
        };
        let spec = v.get("Spec").cloned().ok_or_else(|| bad("no Spec"))?;
        if !spec.get("process").is_some_and(Value::is_object) {
            return Err(bad("Spec without a process"));
        }
        Ok(Template {
            runtime: ContainerRuntime {
                name: name.into(),
                options,
            },
            spec,
            namespace: namespace.into(),
        })
    }

    /// The container `ctr run <flags> --rootfs … <id> <argv>` would create.
    pub fn container(&self, id: &str, argv: &[&str]) -> Result<Container, ApiError> {
        let mut spec = self.spec.clone();
        spec["process"]["args"] = argv.iter().map(|a| Value::from(*a)).collect();
        if let Some(linux) = spec.get_mut("linux").and_then(Value::as_object_mut) {
            linux.insert(
                "cgroupsPath".into(),
                Value::from(format!("/{}/{id}", self.namespace)),
            );
        }
        let value = serde_json::to_vec(&spec).map_err(|e| ApiError::Template(e.to_string()))?;
        Ok(Container {
            id: id.into(),
            runtime: Some(self.runtime.clone()),
            spec: Some(Any {
                type_url: SPEC_TYPE_URL.into(),
                value,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = r#"{"ID":"tmpl","Runtime":{"Name":"io.containerd.rund.v2",
        "Options":{"type_url":"runtimeoptions.v1.Options","value":"EgUvYy50bw=="}},
        "Spec":{"process":{"args":["/bin/true"],"cwd":"/"},"root":{"path":"/r"},
        "linux":{"cgroupsPath":"/bench/tmpl","namespaces":[{"type":"pid"}]}}}"#;

    #[test]
    fn a_pod_differs_from_the_template_only_in_id_cgroup_path_and_argv() {
        let t = Template::from_info(INFO, "bench").unwrap();
        let c = t.container("p-1", &["/bin/sleep", "9"]).unwrap();
        assert_eq!(c.id, "p-1");
        let rt = c.runtime.unwrap();
        assert_eq!(rt.name, "io.containerd.rund.v2");
        let opts = rt.options.unwrap();
        assert_eq!(opts.type_url, "runtimeoptions.v1.Options");
        // runtimeoptions.v1.Options { config_path (2): "/c.to" }
        assert_eq!(opts.value, b"\x12\x05/c.to");
        let spec = c.spec.unwrap();
        assert_eq!(spec.type_url, SPEC_TYPE_URL);
        let s: Value = serde_json::from_slice(&spec.value).unwrap();
        assert_eq!(s["process"]["args"], serde_json::json!(["/bin/sleep", "9"]));
        assert_eq!(s["linux"]["cgroupsPath"], "/bench/p-1");
        assert_eq!(s["root"]["path"], "/r");
        assert_eq!(s["linux"]["namespaces"][0]["type"], "pid");
    }

    #[test]
    fn a_runtime_without_options_sends_none_and_bad_info_is_an_error() {
        let info = INFO.replace(
            r#""Options":{"type_url":"runtimeoptions.v1.Options","value":"EgUvYy50bw=="}"#,
            r#""Options":null"#,
        );
        let t = Template::from_info(&info, "bench").unwrap();
        assert!(t
            .container("x", &["/bin/true"])
            .unwrap()
            .runtime
            .unwrap()
            .options
            .is_none());
        for bad in ["{}", "not json", r#"{"Runtime":{"Name":"r"},"Spec":{}}"#] {
            assert!(Template::from_info(bad, "bench").is_err(), "{bad}");
        }
    }
}
