//! deploy/*.yaml against the Kubernetes API fields they use. Every object is read into typed
//! structs that deny unknown fields, so a misspelt field fails here as the API server would
//! refuse (or silently drop) it; then the pieces are checked against each other and the
//! DaemonSet's `rund install` command against rund's own argument parser.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser;
use serde::Deserialize;

use crate::cli::install::snippet::RUNTIME;
use crate::cli::{Cli, Command};

type Map = BTreeMap<String, String>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    name: String,
    namespace: Option<String>,
    labels: Option<Map>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind")]
enum Object {
    RuntimeClass(RuntimeClass),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    DaemonSet(DaemonSet),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuntimeClass {
    api_version: String,
    metadata: Meta,
    handler: String,
    overhead: Overhead,
    scheduling: Scheduling,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Overhead {
    pod_fixed: Map,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Scheduling {
    node_selector: Map,
    tolerations: Option<Vec<Toleration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Toleration {
    key: Option<String>,
    operator: Option<String>,
    value: Option<String>,
    effect: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceAccount {
    api_version: String,
    metadata: Meta,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterRole {
    api_version: String,
    metadata: Meta,
    rules: Vec<PolicyRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyRule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterRoleBinding {
    api_version: String,
    metadata: Meta,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RoleRef {
    api_group: String,
    kind: String,
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSet {
    api_version: String,
    metadata: Meta,
    spec: DaemonSetSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSetSpec {
    selector: LabelSelector,
    update_strategy: Option<UpdateStrategy>,
    template: PodTemplate,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LabelSelector {
    match_labels: Map,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateStrategy {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PodTemplate {
    metadata: TemplateMeta,
    spec: PodSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateMeta {
    labels: Map,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodSpec {
    service_account_name: String,
    #[serde(rename = "hostPID")]
    host_pid: bool,
    priority_class_name: Option<String>,
    node_selector: Map,
    tolerations: Vec<Toleration>,
    init_containers: Vec<Container>,
    containers: Vec<Container>,
    volumes: Vec<Volume>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Container {
    name: String,
    image: String,
    command: Option<Vec<String>>,
    args: Option<Vec<String>>,
    env: Option<Vec<EnvVar>>,
    security_context: Option<SecurityContext>,
    volume_mounts: Option<Vec<VolumeMount>>,
    resources: Option<Resources>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EnvVar {
    name: String,
    value: Option<String>,
    value_from: Option<EnvSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EnvSource {
    field_ref: FieldRef,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldRef {
    field_path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecurityContext {
    privileged: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VolumeMount {
    name: String,
    mount_path: String,
    read_only: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resources {
    requests: Option<Map>,
    limits: Option<Map>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Volume {
    name: String,
    host_path: HostPath,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostPath {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

fn parse_docs(text: &str) -> Result<Vec<Object>, serde_yaml::Error> {
    serde_yaml::Deserializer::from_str(text)
        .map(Object::deserialize)
        .collect()
}

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn runtime_class() -> RuntimeClass {
    let docs = parse_docs(&deploy("runtimeclass.yaml")).unwrap();
    match <[Object; 1]>::try_from(docs) {
        Ok([Object::RuntimeClass(rc)]) => rc,
        other => panic!("one RuntimeClass expected: {other:?}"),
    }
}

#[test]
fn runtime_class_has_overhead_and_scheduling() {
    let rc = runtime_class();
    assert_eq!(rc.api_version, "node.k8s.io/v1");
    assert_eq!(
        (rc.metadata.name.as_str(), rc.handler.as_str()),
        ("rund", RUNTIME)
    );
    // The figures measured with `make bench` (shim + agent RSS per pod, rounded up).
    assert_eq!(
        rc.overhead.pod_fixed.get("memory").map(String::as_str),
        Some("8Mi")
    );
    assert_eq!(
        rc.overhead.pod_fixed.get("cpu").map(String::as_str),
        Some("10m")
    );
    assert_eq!(
        rc.scheduling
            .node_selector
            .get("rund.io/installed")
            .map(String::as_str),
        Some("true")
    );
    assert!(rc.scheduling.tolerations.is_none());
}

#[test]
fn rund_deploy_installs_with_rund_s_own_flags_and_labels_the_node() {
    let docs = parse_docs(&deploy("rund-deploy.yaml")).unwrap();
    let mut sa = None;
    let mut role = None;
    let mut binding = None;
    let mut ds = None;
    for d in docs {
        match d {
            Object::ServiceAccount(x) => sa = Some(x),
            Object::ClusterRole(x) => role = Some(x),
            Object::ClusterRoleBinding(x) => binding = Some(x),
            Object::DaemonSet(x) => ds = Some(x),
            Object::RuntimeClass(_) => panic!("the RuntimeClass lives in runtimeclass.yaml"),
        }
    }
    let (sa, role, binding, ds) = (sa.unwrap(), role.unwrap(), binding.unwrap(), ds.unwrap());
    assert_eq!(sa.api_version, "v1");
    assert_eq!(ds.api_version, "apps/v1");
    assert_eq!(role.api_version, "rbac.authorization.k8s.io/v1");
    assert_eq!(binding.api_version, "rbac.authorization.k8s.io/v1");

    // RBAC: the binding ties the DaemonSet's account to a role that may patch nodes.
    let pod = &ds.spec.template.spec;
    let ns = ds.metadata.namespace.as_deref().unwrap();
    assert_eq!(pod.service_account_name, sa.metadata.name);
    assert_eq!(sa.metadata.namespace.as_deref(), Some(ns));
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("ClusterRole", role.metadata.name.as_str())
    );
    assert_eq!(binding.role_ref.api_group, "rbac.authorization.k8s.io");
    assert!(binding
        .subjects
        .iter()
        .any(|s| s.kind == "ServiceAccount" && s.name == sa.metadata.name && s.namespace == ns));
    assert!(role.rules.iter().any(|r| r.api_groups == [""]
        && r.resources.contains(&"nodes".to_owned())
        && r.verbs.contains(&"patch".to_owned())));

    // The selector picks the template's pods.
    for (k, v) in &ds.spec.selector.match_labels {
        assert_eq!(ds.spec.template.metadata.labels.get(k), Some(v), "{k}");
    }
    assert_eq!(
        ds.metadata.labels.as_ref(),
        Some(&ds.spec.template.metadata.labels)
    );
    assert_eq!(
        ds.spec.update_strategy.as_ref().map(|u| u.kind.as_str()),
        Some("RollingUpdate")
    );
    assert!(
        pod.host_pid,
        "nsenter into PID 1's mount namespace needs hostPID"
    );
    assert_eq!(
        pod.node_selector
            .get("kubernetes.io/os")
            .map(String::as_str),
        Some("linux")
    );
    for c in pod.init_containers.iter().chain(&pod.containers) {
        for m in c.volume_mounts.iter().flatten() {
            assert!(
                pod.volumes.iter().any(|v| v.name == m.name),
                "{}: {}",
                c.name,
                m.name
            );
        }
    }

    // The install: privileged, in the host's mount namespace, rund's own flags.
    let install = &pod.init_containers[0];
    assert_eq!(install.name, "install");
    assert!(install
        .security_context
        .as_ref()
        .is_some_and(|s| s.privileged));
    let cmd = install.command.as_ref().unwrap();
    let sep = cmd.iter().position(|a| a == "--").unwrap();
    assert_eq!(cmd[..sep], ["nsenter", "--target", "1", "--mount"]);
    let argv = &cmd[sep + 1..];
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Command::Install(a) = cli.command else {
        panic!("not `rund install`: {argv:?}")
    };
    assert!(a.restart && !a.dry_run, "{a:?}");
    assert_eq!(a.prefix, Path::new("/usr/local"));
    let from = a.from.as_ref().expect("--from");
    assert_eq!(Path::new(&argv[0]).parent(), Some(from.as_path()));
    // The binaries come from a host directory the pod mounts read-only, so a node without
    // them never starts the pod.
    let mount = install
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Path::new(&m.mount_path) == from)
        .expect("the binary dir is mounted");
    assert_eq!(mount.read_only, Some(true));
    let vol = pod.volumes.iter().find(|v| v.name == mount.name).unwrap();
    assert_eq!(Path::new(&vol.host_path.path), from);
    assert_eq!(vol.host_path.kind, "Directory");

    // Then the label the RuntimeClass schedules on, on this very node.
    let label = &pod.init_containers[1];
    let args = label.args.as_ref().unwrap();
    assert_eq!(args[..3], ["label", "node", "$(NODE_NAME)"]);
    let (key, value) = args[3].split_once('=').unwrap();
    let rc = runtime_class();
    assert_eq!(
        rc.scheduling.node_selector.get(key).map(String::as_str),
        Some(value)
    );
    let env = label.env.as_ref().unwrap();
    assert!(env.iter().any(|e| e.name == "NODE_NAME"
        && e.value.is_none()
        && e.value_from
            .as_ref()
            .is_some_and(|f| f.field_ref.field_path == "spec.nodeName")));
    assert!(pod.containers.iter().all(|c| c.security_context.is_none()));
    for c in pod.init_containers.iter().chain(&pod.containers) {
        assert!(c.image.contains(':'), "{}: pin a tag: {}", c.name, c.image);
    }
    for c in &pod.containers {
        let r = c.resources.as_ref().expect("resources");
        assert!(
            r.requests.is_some() && r.limits.as_ref().is_some_and(|l| l.contains_key("memory"))
        );
    }
    assert!(pod.priority_class_name.is_some());
    // Every node, tainted or not, that is to run rund pods needs rund installed.
    assert!(pod
        .tolerations
        .iter()
        .any(|t| t.operator.as_deref() == Some("Exists")
            && t.key.is_none()
            && t.value.is_none()
            && t.effect.is_none()));
    assert_eq!(binding.metadata.name, "rund-deploy");
}

#[test]
fn a_misspelt_field_is_caught() {
    let good = deploy("rund-deploy.yaml");
    for (right, wrong) in [
        ("hostPID:", "hostPid:"),
        ("mountPath:", "mountpath:"),
        ("serviceAccountName:", "serviceAcountName:"),
        ("readOnly:", "readonly:"),
    ] {
        assert!(good.contains(right), "{right}");
        let bad = good.replacen(right, wrong, 1);
        let e = parse_docs(&bad).expect_err(wrong);
        assert!(
            e.to_string().contains(wrong.trim_end_matches(':')),
            "{wrong}: {e}"
        );
    }
    let rc = deploy("runtimeclass.yaml").replace("nodeSelector:", "nodeSelecter:");
    assert!(parse_docs(&rc).is_err());
    let rc = deploy("runtimeclass.yaml").replace("podFixed:", "podfixed:");
    assert!(parse_docs(&rc).is_err());
}
