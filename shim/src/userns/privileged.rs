//! Containers that a user namespace changes most, for `[userns] mode =
//! "always"`: a privileged container (its device rules allow every device,
//! as `--privileged` and CRI's privileged do), and one holding a capability
//! of `privileged_caps` (default CAP_NET_ADMIN) while the pod's network
//! namespace belongs to the host, where that capability does nothing.

use oci_spec::runtime::{Capability, LinuxDeviceType, Spec};

fn cap_name(c: &Capability) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{c:?}"))
}

/// Why this container would not behave as under runc in a user namespace,
/// or `None`. `host_netns`: the pod's network namespace is not owned by its
/// user namespace (a joined CNI netns, or the host's).
pub fn needs_host(spec: &Spec, host_netns: bool, caps: &[Capability]) -> Option<String> {
    let linux = spec.linux().as_ref();
    let all_devices = linux
        .and_then(|l| l.resources().as_ref())
        .and_then(|r| r.devices().as_ref())
        .is_some_and(|rules| {
            rules.iter().any(|d| {
                d.allow()
                    && matches!(d.typ(), None | Some(LinuxDeviceType::A))
                    && d.major().is_none()
                    && d.minor().is_none()
            })
        });
    if all_devices {
        return Some("privileged: its device rules allow every device".into());
    }
    if !host_netns {
        return None;
    }
    let sets = spec
        .process()
        .as_ref()
        .and_then(|p| p.capabilities().as_ref())?;
    let held = |c: &Capability| {
        [sets.bounding(), sets.effective(), sets.permitted()]
            .iter()
            .any(|s| s.as_ref().is_some_and(|s| s.contains(c)))
    };
    let c = caps.iter().find(|c| held(c))?;
    Some(format!(
        "holds {} in a network namespace the host owns, where only the host's root may use it",
        cap_name(c)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(devices: &str, caps: &str) -> Spec {
        let text = format!(
            r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},
                "process":{{"args":["true"],"cwd":"/","user":{{"uid":0,"gid":0}},"capabilities":{{{caps}}}}},
                "linux":{{"resources":{{"devices":[{devices}]}}}}}}"#
        );
        crate::spec::parse(text.as_bytes()).unwrap()
    }

    const DENY_ALL: &str = r#"{"allow":false,"access":"rwm"}"#;
    const NET_ADMIN: &str = r#""bounding":["CAP_NET_ADMIN","CAP_CHOWN"]"#;

    #[test]
    fn privileged_means_every_device_allowed() {
        let caps = [Capability::NetAdmin];
        let privileged = spec(
            &format!(r#"{DENY_ALL},{{"allow":true,"access":"rwm"}}"#),
            "",
        );
        let why = needs_host(&privileged, false, &caps).unwrap();
        assert!(why.contains("privileged"), "{why}");
        let typed = spec(r#"{"allow":true,"type":"a","access":"rwm"}"#, "");
        assert!(needs_host(&typed, false, &caps).is_some());
        let one = spec(
            r#"{"allow":true,"type":"c","major":10,"minor":229,"access":"rwm"}"#,
            "",
        );
        assert_eq!(needs_host(&one, true, &caps), None);
        assert_eq!(needs_host(&spec(DENY_ALL, ""), true, &caps), None);
    }

    #[test]
    fn listed_caps_count_only_in_a_host_netns() {
        let s = spec(DENY_ALL, NET_ADMIN);
        let why = needs_host(&s, true, &[Capability::NetAdmin]).unwrap();
        assert!(why.contains("CAP_NET_ADMIN"), "{why}");
        assert_eq!(needs_host(&s, false, &[Capability::NetAdmin]), None);
        assert_eq!(needs_host(&s, true, &[Capability::NetRaw]), None);
        assert_eq!(needs_host(&s, true, &[]), None);
    }
}
