//! Root integration test: runs `rund-agent launch` the way the shim does and
//! drives containers through the ttrpc API with a busybox rootfs.

mod support;

use nix::unistd::Pid;
use rund_proto::launch::LaunchConfig;
use rund_proto::*;
use support::*;

#[tokio::test(flavor = "current_thread")]
async fn launch_and_run_containers() {
    if !can_run() {
        return;
    }
    let cfg = LaunchConfig {
        sandbox_id: "itest".into(),
        new_net: true,
        new_ipc: true,
        new_uts: true,
        debug: true,
        ..Default::default()
    };
    let (sb, mut guard) = launch_agent(&cfg).unwrap();
    let agent_pid = guard.0;
    // An agent launched for its pod has nothing to claim.
    let e = sb
        .client
        .claim_sandbox(
            ttrpc::context::with_timeout(0),
            &ClaimSandboxRequest::default(),
        )
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("nothing to claim"), "{e:?}");
    let ping = |v: u32| PingRequest {
        protocol_version: v,
        ..Default::default()
    };
    let ctx = || ttrpc::context::with_timeout(0);
    let ok = sb
        .client
        .ping(ctx(), &ping(PROTOCOL_VERSION))
        .await
        .unwrap();
    assert_eq!(ok.agent_pid, 1);
    let e = sb
        .client
        .ping(ctx(), &ping(PROTOCOL_VERSION + 1))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("protocol"), "{e:?}");

    // A request whose fd batch never comes fails on its own, with a clear
    // error, and blocks nothing after it.
    let stalled = CreateContainerRequest {
        container_id: "stalled".into(),
        fd_seq: 999,
        oci_spec: spec(&["true"]),
        ..Default::default()
    };
    let e = sb
        .client
        .create_container(ttrpc::context::with_timeout(0), &stalled)
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("did not arrive"), "{e:?}");

    // Output reaches the stdout fd; the exit status comes back.
    let (pid, out) = sb
        .create(
            "c1",
            "",
            spec(&["sh", "-c", "echo hello-$(cat /proc/sys/kernel/hostname)"]),
        )
        .await;
    assert!(pid.unwrap() > 1);
    sb.start("c1", "").await;
    assert_eq!(sb.wait("c1", "").await, 0);
    assert_eq!(read_all(out), "hello-rund-test\n");

    let (pid, _out) = sb.create("c2", "", spec(&["sh", "-c", "exit 7"])).await;
    pid.unwrap();
    sb.start("c2", "").await;
    assert_eq!(sb.wait("c2", "").await, 7);

    // A missing binary fails CreateProcess with a message naming it.
    let (res, _out) = sb.create("c3", "", spec(&["no-such-binary"])).await;
    let err = res.unwrap_err();
    assert!(
        err.contains("no-such-binary") && err.contains("PATH"),
        "{err}"
    );

    // TERM reaches a shell PID 1 that has no handler (rund carries out the
    // default action, reported as death by TERM); an exec joins the container.
    let (pid, _out) = sb
        .create("c4", "", spec(&["sh", "-c", "sleep 1000 & wait"]))
        .await;
    pid.unwrap();
    sb.start("c4", "").await;
    let exec = serde_json::to_vec(&serde_json::json!({"args": ["sh", "-c", "echo exec-$(cat /proc/sys/kernel/hostname)"], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}})).unwrap();
    let (epid, eout) = sb.create("c4", "e1", exec).await;
    assert!(epid.unwrap() > 1);
    sb.start("c4", "e1").await;
    assert_eq!(sb.wait("c4", "e1").await, 0);
    assert_eq!(read_all(eout), "exec-rund-test\n");
    let pids = sb
        .client
        .list_pids(
            ttrpc::context::with_timeout(0),
            &ListPidsRequest {
                container_id: "c4".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(pids.processes.len() >= 2, "{:?}", pids.processes);
    let sig = SignalProcessRequest {
        container_id: "c4".into(),
        signal: libc::SIGTERM as u32,
        ..Default::default()
    };
    sb.client
        .signal_process(ttrpc::context::with_timeout(0), &sig)
        .await
        .unwrap();
    assert_eq!(sb.wait("c4", "").await, 143);
    let again = sb
        .client
        .signal_process(ttrpc::context::with_timeout(0), &sig)
        .await
        .unwrap_err();
    assert!(format!("{again:?}").contains("already exited"), "{again:?}");
    sb.client
        .delete_process(
            ttrpc::context::with_timeout(0),
            &DeleteProcessRequest {
                container_id: "c4".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // Teardown: a running container is TERMed; the agent exits after replying.
    let (pid, _out) = sb.create("c5", "", spec(&["sleep", "1000"])).await;
    pid.unwrap();
    sb.start("c5", "").await;
    sb.client
        .destroy_sandbox(
            ttrpc::context::with_timeout(0),
            &DestroySandboxRequest {
                grace_seconds: 5,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let st = nix::sys::wait::waitpid(Pid::from_raw(agent_pid), None).unwrap();
    assert_eq!(
        st,
        nix::sys::wait::WaitStatus::Exited(Pid::from_raw(agent_pid), 0)
    );
    guard.0 = 0;
}

/// A warm agent is launched with nothing of a pod, claimed once (a new
/// network namespace, the pod's hostname and sysctls), and serves the pod's
/// containers in those namespaces. A warm launch that carries a pod's part
/// is refused; so is a second claim. A head start's agent may make its
/// network namespace at launch, and a claim that asks for none keeps it.
#[tokio::test(flavor = "current_thread")]
async fn a_warm_agent_is_claimed_once() {
    if !can_run() {
        return;
    }
    let warm = LaunchConfig {
        sandbox_id: "warm".into(),
        new_ipc: true,
        new_uts: true,
        warm: true,
        ..Default::default()
    };
    let e = launch_agent(&LaunchConfig {
        hostname: Some("early".into()),
        ..warm.clone()
    })
    .err()
    .expect("a warm launch with a hostname is refused");
    assert!(e.contains("a warm agent gets its pod's hostname"), "{e}");
    let e = launch_agent(&LaunchConfig {
        userns: true,
        ..warm.clone()
    })
    .err()
    .expect("a warm launch with a user namespace is refused");
    assert!(e.contains("no user namespace"), "{e}");

    let net_of = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    let (head, mut head_guard) = launch_agent(&LaunchConfig {
        new_net: true,
        ..warm.clone()
    })
    .unwrap();
    let made = net_of(head_guard.0);
    assert_ne!(made, net_of(std::process::id() as i32), "made at launch");
    let keep = ClaimSandboxRequest {
        sandbox_id: "pod-0".into(),
        ..Default::default()
    };
    head.client
        .claim_sandbox(ttrpc::context::with_timeout(0), &keep)
        .await
        .unwrap();
    assert_eq!(net_of(head_guard.0), made, "the claim keeps it");
    head.client
        .destroy_sandbox(
            ttrpc::context::with_timeout(0),
            &DestroySandboxRequest::default(),
        )
        .await
        .unwrap();
    let pid = Pid::from_raw(head_guard.0);
    nix::sys::wait::waitpid(pid, None).unwrap();
    head_guard.0 = 0;

    let (sb, _guard) = launch_agent(&warm).unwrap();
    let ctx = || ttrpc::context::with_timeout(0);
    let claim = ClaimSandboxRequest {
        sandbox_id: "pod-1".into(),
        new_net: true,
        hostname: "claimed-pod".into(),
        sysctls: vec![Sysctl {
            key: "kernel.shm_rmid_forced".into(),
            value: "1".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    sb.client.claim_sandbox(ctx(), &claim).await.unwrap();
    let e = sb.client.claim_sandbox(ctx(), &claim).await.unwrap_err();
    assert!(format!("{e:?}").contains("already claimed"), "{e:?}");

    // A container in the sandbox's net, uts and ipc namespaces sees the claim.
    let mut plan = NamespacePlan::default();
    for kind in ["net", "uts", "ipc"] {
        plan.set(kind, NsSource::NS_SANDBOX);
    }
    let mut spec_v: serde_json::Value = serde_json::from_slice(&spec(&[
        "sh",
        "-c",
        "echo $(cat /proc/sys/kernel/hostname) $(cat /proc/sys/kernel/shm_rmid_forced); cat /proc/net/dev",
    ]))
    .unwrap();
    spec_v.as_object_mut().unwrap().remove("hostname");
    let (pid, out) = sb
        .create_with(
            "c1",
            serde_json::to_vec(&spec_v).unwrap(),
            ContainerOptions {
                namespaces: Some(plan).into(),
                ..Default::default()
            },
        )
        .await;
    pid.unwrap();
    sb.start("c1", "").await;
    assert_eq!(sb.wait("c1", "").await, 0);
    let out = read_all(out);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("claimed-pod 1"), "{out}");
    // A new network namespace has only its loopback device.
    let devices: Vec<&str> = lines
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(devices, ["lo"], "{out}");
}
