//! The OCI spec of a pod sandbox, built from the CRI pod config the way
//! containerd's podsandbox controller builds the pause container's, so the
//! rest of rund treats it exactly as it treats a pause container's spec.

use oci_spec::runtime::Spec;
use serde_json::{json, Value};

use super::podconfig::{Mode, PodConfig};

/// containerd's cgroupsPath for a sandbox: `<parent>/<id>`, or the systemd
/// form when the parent is a slice.
pub fn cgroups_path(parent: &str, id: &str) -> String {
    if parent.ends_with(".slice") {
        let slice = parent.rsplit('/').next().unwrap_or(parent);
        format!("{slice}:cri-containerd:{id}")
    } else {
        format!("{}/{id}", parent.trim_end_matches('/'))
    }
}

pub fn build(cfg: &PodConfig, id: &str, netns_path: &str) -> Result<Spec, serde_json::Error> {
    let mut ns = vec![json!({"type": "mount"})];
    if cfg.pid != Mode::Node {
        ns.push(json!({"type": "pid"}));
    }
    if cfg.ipc != Mode::Node {
        ns.push(json!({"type": "ipc"}));
    }
    if cfg.network != Mode::Node {
        // containerd made the pod's netns (and CNI set it up) already.
        ns.push(if netns_path.is_empty() {
            json!({"type": "network"})
        } else {
            json!({"type": "network", "path": netns_path})
        });
        ns.push(json!({"type": "uts"}));
    }
    let mut linux = json!({
        "namespaces": ns,
        "sysctl": cfg.sysctls,
    });
    if !cfg.cgroup_parent.is_empty() {
        linux["cgroupsPath"] = json!(cgroups_path(&cfg.cgroup_parent, id));
    }
    if let Some((uids, gids)) = &cfg.userns {
        if let Some(n) = linux["namespaces"].as_array_mut() {
            n.push(json!({"type": "user"}));
        }
        let maps = |r: &[super::podconfig::IdRange]| -> Value {
            r.iter()
                .map(|m| json!({"hostID": m.host_id, "containerID": m.container_id, "size": m.length}))
                .collect()
        };
        linux["uidMappings"] = maps(uids);
        linux["gidMappings"] = maps(gids);
    }
    let mut annotations = cfg.annotations.clone();
    for (k, v) in [
        (rund_annotations::CRI_CONTAINER_TYPE, "sandbox"),
        (rund_annotations::CRI_SANDBOX_ID, id),
        (rund_annotations::CRI_SANDBOX_NAME, &cfg.name),
        (rund_annotations::CRI_SANDBOX_NAMESPACE, &cfg.namespace),
        (rund_annotations::CRI_SANDBOX_UID, &cfg.uid),
        (
            rund_annotations::CRI_SANDBOX_LOG_DIRECTORY,
            &cfg.log_directory,
        ),
    ] {
        annotations.insert(k.to_string(), v.to_string());
    }
    let hostname = (cfg.network != Mode::Node && !cfg.hostname.is_empty()).then_some(&cfg.hostname);
    let spec = json!({
        "ociVersion": "1.1.0",
        // The agent plays the sandbox: no process runs from this spec.
        "process": {"args": ["rund-sandbox"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": hostname,
        "linux": linux,
        "annotations": annotations,
    });
    serde_json::from_value(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::namespaces::sandbox_namespaces;

    #[test]
    fn cgroup_paths_follow_containerd() {
        assert_eq!(
            cgroups_path("/kubepods/besteffort/pod1", "abc"),
            "/kubepods/besteffort/pod1/abc"
        );
        assert_eq!(
            cgroups_path("kubepods-besteffort-pod1.slice", "abc"),
            "kubepods-besteffort-pod1.slice:cri-containerd:abc"
        );
    }

    #[test]
    fn the_spec_asks_for_what_the_pod_config_says() {
        let cfg = PodConfig {
            name: "web".into(),
            hostname: "web".into(),
            pid: Mode::Node,
            cgroup_parent: "/kubepods/pod1".into(),
            sysctls: [("kernel.shm_rmid_forced".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let s = build(&cfg, "sb1", "/var/run/netns/cni-1").unwrap();
        crate::spec::check_supported(&s).unwrap();
        assert_eq!(crate::spec::role(&s), crate::spec::Role::PodSandbox);
        let ns = sandbox_namespaces(&s).unwrap();
        assert!(ns.host_pid && ns.new_ipc && ns.new_uts && !ns.new_net);
        assert_eq!(ns.join[0].0, "net");
        let linux = s.linux().as_ref().unwrap();
        assert_eq!(
            linux.cgroups_path().as_ref().unwrap().to_str(),
            Some("/kubepods/pod1/sb1")
        );
        assert_eq!(
            linux.sysctl().as_ref().unwrap()["kernel.shm_rmid_forced"],
            "1"
        );
        assert_eq!(s.hostname().as_deref(), Some("web"));
    }
}
