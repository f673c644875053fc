//! rund's Sandbox service (`sandboxer = "shim"`, containerd 2.1 from the cache) reached through
//! containerd's sandbox Controller API, the way CRI and other clients reach a sandboxer, and
//! PingSandbox and Platform, which containerd 2.1 does not serve there, on the shim's own socket.
//!
//! - StopSandbox enforces the grace: with a timeout, a container that traps TERM exits by its
//!   handler and one that ignores TERM is killed (137) once the timeout has passed; without
//!   one (CRI's StopPodSandbox sends none), the pod's `rund.io/grace-period-seconds` applies.
//!   CRI's StopPodSandbox itself KILLs every container before it stops the sandbox (timeout 0),
//!   so only this API shows the sandbox's own grace.
//! - Status (READY with the agent's pid, verbose info through CRI's PodSandboxStatus; NOTREADY
//!   with an exit time after a stop), Metrics (the sandbox cgroup's); on the shim's socket,
//!   Platform (CRI asks it at CreateContainer; containerd's Controller API does not serve it)
//!   and Ping (a stopped or unknown sandbox is an error).

use std::time::{Duration, Instant};

use containerd_shim_protos::sandbox_api::{PingRequest, PlatformRequest};
use containerd_shim_protos::sandbox_async::SandboxClient;
use containerd_shim_protos::shim_async::Client;
use containerd_shim_protos::ttrpc::Code;
use rund_tests::containerd::K8S_NAMESPACE;
use rund_tests::cri::api::ContainerStatus;
use rund_tests::cri::sandboxer::{start_shim_mode, SHIM_SANDBOXER};
use rund_tests::cri::{CriFixture, PodSpec};
use rund_tests::shim::{ctx, status_of};
use rund_tests::{ContainerSpec, BUSYBOX_IMAGE};

/// How long a container's exit may take to reach CRI: a hang guard only.
const WAIT: Duration = Duration::from_secs(60);

/// The containers signal readiness once their trap is installed.
const CATCHER: &str = "trap 'exit 7' TERM; touch /tmp/ready; while :; do sleep 1; done";
const IGNORER: &str = "trap '' TERM; touch /tmp/ready; while :; do sleep 1; done";

/// A pod network pod with a TERM catcher and a TERM ignorer, both with their traps set.
fn pod_with_traps(fx: &mut CriFixture, pod: &PodSpec) -> (String, String, String) {
    let pod_id = fx.run_pod(pod).expect("RunPodSandbox");
    let mut ids = Vec::new();
    for (name, script) in [("catcher", CATCHER), ("ignorer", IGNORER)] {
        let spec = ContainerSpec::new(name, BUSYBOX_IMAGE, &["sh", "-c", script]);
        let id = fx.run(&pod_id, &spec, pod).expect(name);
        let r = fx.wait_until(&id, "test -e /tmp/ready");
        assert_eq!(r.code, 0, "{name} installed its trap: {r:?}");
        ids.push(id);
    }
    let ignorer = ids.pop().expect("two ids");
    let catcher = ids.pop().expect("two ids");
    (pod_id, catcher, ignorer)
}

/// The container's status once CRI has seen it exit.
fn exited(fx: &CriFixture, id: &str) -> ContainerStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let st = fx.cri.container_status(id).expect("ContainerStatus");
        if st.state == 2 || Instant::now() >= deadline {
            return st;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the sandbox through the Controller API with `timeout_secs`; checks how each container
/// ended and that the call took at least `grace`.
fn stop_and_check(fx: &CriFixture, pod_id: &str, ids: (&str, &str), timeout_secs: u32, grace: u64) {
    let (catcher, ignorer) = ids;
    let t0 = Instant::now();
    fx.ctd
        .sandbox_stop(SHIM_SANDBOXER, pod_id, timeout_secs)
        .expect("gRPC")
        .unwrap_or_else(|e| panic!("Controller.Stop: {e}\n{}", fx.ctd.log_tail(40)));
    let took = t0.elapsed();
    let st = exited(fx, catcher);
    assert_eq!(
        (st.state, st.exit_code),
        (2, 7),
        "TERM reached the catcher's handler: {st:?}"
    );
    let st = exited(fx, ignorer);
    assert_eq!(
        (st.state, st.exit_code),
        (2, 137),
        "the ignorer was killed after the grace: {st:?}"
    );
    assert!(
        took >= Duration::from_secs(grace),
        "KILL came only after the {grace} s grace: {took:?}"
    );
    let st = fx.cri.pod_sandbox_status(pod_id).expect("PodSandboxStatus");
    assert_eq!(st.state, 1, "SANDBOX_NOTREADY: {st:?}");
}

#[test]
fn stop_sandbox_timeout_is_the_grace() {
    // A default grace of an hour: were the timeout ignored, Stop would outlast the call's hang
    // guard and fail.
    let config = "grace_period_seconds = 3600\n".to_string();
    let Some(mut fx) = start_shim_mode("stop_sandbox_timeout_is_the_grace", Some(config)) else {
        return;
    };
    let mut pod = fx.pod_spec("sbxstop");
    pod.host_network = false;
    let (pod_id, c, i) = pod_with_traps(&mut fx, &pod);
    stop_and_check(&fx, &pod_id, (&c, &i), 3, 3);
    fx.finish();
}

#[test]
fn pod_grace_annotation_applies_without_a_timeout() {
    // A default grace of an hour: were the annotation ignored, Stop would outlast the call's
    // hang guard and fail.
    let config = "grace_period_seconds = 3600\n".to_string();
    let Some(mut fx) = start_shim_mode(
        "pod_grace_annotation_applies_without_a_timeout",
        Some(config),
    ) else {
        return;
    };
    let mut pod = fx.pod_spec("sbxann");
    pod.host_network = false;
    pod.annotations
        .insert("rund.io/grace-period-seconds".into(), "2".into());
    let (pod_id, c, i) = pod_with_traps(&mut fx, &pod);
    stop_and_check(&fx, &pod_id, (&c, &i), 0, 2);
    fx.finish();
}

/// A call of the Sandbox service on the pod shim's own socket (the address containerd
/// recorded in its bundle): PingSandbox, which containerd 2.1 never calls, and Platform, which
/// its Controller API does not serve.
fn on_shim<T>(
    fx: &CriFixture,
    pod_id: &str,
    call: impl AsyncFnOnce(SandboxClient) -> containerd_shim_protos::ttrpc::Result<T>,
) -> Result<T, (Code, String)> {
    // The shim sandboxer's own state dir holds a sandbox's bundle.
    let bundle = fx
        .ctd
        .layout
        .state
        .join("io.containerd.sandbox.controller.v1.shim")
        .join(K8S_NAMESPACE)
        .join(pod_id);
    let address = std::fs::read_to_string(bundle.join("address"))
        .unwrap_or_else(|e| panic!("the shim's address in {}: {e}", bundle.display()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let client = Client::connect(address.trim())
            .await
            .expect("connect the shim");
        call(SandboxClient::new(client))
            .await
            .map_err(|e| status_of(&e).unwrap_or((Code::UNKNOWN, e.to_string())))
    })
}

fn ping(fx: &CriFixture, pod_id: &str, sandbox_id: &str) -> Result<(), (Code, String)> {
    let req = PingRequest {
        sandbox_id: sandbox_id.to_owned(),
        ..Default::default()
    };
    on_shim(fx, pod_id, async move |c| {
        c.ping_sandbox(ctx(), &req).await.map(drop)
    })
}

/// cgroups' PidsStat; the Metrics messages below keep only their pids field (v1: 2, v2: 1).
#[derive(Clone, PartialEq, prost::Message)]
struct PidsStat {
    #[prost(uint64, tag = "1")]
    current: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetricsV1 {
    #[prost(message, optional, tag = "2")]
    pids: Option<PidsStat>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetricsV2 {
    #[prost(message, optional, tag = "1")]
    pids: Option<PidsStat>,
}

#[test]
fn status_platform_metrics_and_ping() {
    let Some(mut fx) = start_shim_mode("status_platform_metrics_and_ping", None) else {
        return;
    };
    let mut pod = fx.pod_spec("sbxcalls");
    pod.host_network = false;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let ctd = &fx.ctd;

    let st = ctd
        .sandbox_status(SHIM_SANDBOXER, &pod_id, false)
        .expect("gRPC")
        .expect("Controller.Status");
    assert_eq!(
        (st.sandbox_id.as_str(), st.state.as_str()),
        (pod_id.as_str(), "SANDBOX_READY")
    );
    assert!(st.created_at.is_some_and(|t| t.seconds > 0), "{st:?}");
    assert!(st.info.is_empty(), "info only when verbose: {st:?}");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", st.pid)).unwrap_or_default();
    assert_eq!(
        comm.trim(),
        "rund-agent",
        "the sandbox pid {} is rund's agent",
        st.pid
    );

    // Verbose, through CRI: the info document names the same pid and the sandbox's spec.
    let (cri_st, info) = fx
        .cri
        .pod_sandbox_status_verbose(&pod_id)
        .expect("verbose PodSandboxStatus");
    assert_eq!(cri_st.state, 0, "SANDBOX_READY: {cri_st:?}");
    let doc: serde_json::Value =
        serde_json::from_str(info.get("info").expect("an info document")).expect("JSON info");
    assert_eq!(doc["pid"], st.pid, "{doc}");
    let ns = doc["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .unwrap_or_else(|| panic!("the spec's namespaces: {doc}"));
    assert!(
        ns.iter()
            .any(|n| n["type"] == "network" && n["path"].as_str().is_some_and(|p| !p.is_empty())),
        "the pod joins the netns CNI set up: {ns:?}"
    );

    let req = PlatformRequest {
        sandbox_id: pod_id.clone(),
        ..Default::default()
    };
    let p = on_shim(&fx, &pod_id, async move |c| c.platform(ctx(), &req).await)
        .expect("Platform")
        .platform
        .into_option()
        .expect("a platform");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!((p.os.as_str(), p.architecture.as_str()), ("linux", arch));
    let (code, msg) = on_shim(&fx, &pod_id, async move |c| {
        let req = PlatformRequest {
            sandbox_id: "not-this-pod".into(),
            ..Default::default()
        };
        c.platform(ctx(), &req).await
    })
    .expect_err("the platform of an unknown sandbox");
    assert_eq!(code, Code::NOT_FOUND, "{msg}");

    let m = ctd
        .sandbox_metrics(SHIM_SANDBOXER, &pod_id)
        .expect("gRPC")
        .expect("Controller.Metrics")
        .expect("a metric");
    assert_eq!(m.id, pod_id);
    let data = m.data.expect("metric data");
    let pids = match data.type_url.as_str() {
        "io.containerd.cgroups.v1.Metrics" => {
            <MetricsV1 as prost::Message>::decode(data.value.as_slice()).map(|m| m.pids)
        }
        "io.containerd.cgroups.v2.Metrics" => {
            <MetricsV2 as prost::Message>::decode(data.value.as_slice()).map(|m| m.pids)
        }
        other => panic!("metrics of type {other}"),
    };
    let current = pids
        .expect("decodable metrics")
        .map(|p| p.current)
        .unwrap_or(0);
    assert!(
        current >= 1,
        "the agent counts in the sandbox cgroup: {current}"
    );

    assert_eq!(ping(&fx, &pod_id, &pod_id), Ok(()));
    let (code, msg) = ping(&fx, &pod_id, "not-this-pod").expect_err("an unknown sandbox");
    assert_eq!(code, Code::NOT_FOUND, "{msg}");

    // After a stop: NOTREADY with an exit time, and Ping fails.
    fx.cri.stop_pod_sandbox(&pod_id).expect("StopPodSandbox");
    let st = fx
        .ctd
        .sandbox_status(SHIM_SANDBOXER, &pod_id, false)
        .expect("gRPC")
        .expect("Controller.Status");
    assert_eq!(st.state, "SANDBOX_NOTREADY", "{st:?}");
    assert!(st.exited_at.is_some_and(|t| t.seconds > 0), "{st:?}");
    let (code, msg) = ping(&fx, &pod_id, &pod_id).expect_err("a stopped sandbox");
    assert_eq!(code, Code::FAILED_PRECONDITION, "{msg}");
    fx.finish();
}
