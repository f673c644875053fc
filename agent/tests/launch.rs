//! Root integration test: runs `rund-agent launch` the way the shim does and
//! drives containers through the ttrpc API with a busybox rootfs.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use rund_proto::fdpass::{self, FdHeader, FdKind};
use rund_proto::launch::{self, LaunchConfig, SyncMsg};
use rund_proto::*;

const BUSYBOX: &str = "/bin/busybox";

/// Kills the agent if the test ends early.
struct AgentGuard(i32);

impl Drop for AgentGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            let _ =
                nix::sys::signal::kill(Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(Pid::from_raw(self.0), None);
        }
    }
}

fn busybox_rootfs(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
    for tool in ["sh", "echo", "cat", "sleep", "true"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
    for d in ["proc", "dev", "tmp"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
}

fn open_tree(path: &Path) -> OwnedFd {
    rund_sys::mount::clone_path(path, true).expect("open_tree")
}

fn spec(args: &[&str]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": args, "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0},
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
        "root": {"path": "rootfs"},
        "hostname": "rund-test",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}
        ],
        "linux": {"maskedPaths": ["/proc/kcore", "/proc/nonexistent"], "readonlyPaths": ["/proc/sys"]}
    }))
    .unwrap()
}

struct Sandbox {
    client: AgentClient,
    fdpass: OwnedFd,
    root: tempfile::TempDir,
    seq: std::cell::Cell<u64>,
}

impl Sandbox {
    /// Sends the fds, then CreateProcess. Returns the read end of stdout.
    async fn create(
        &self,
        id: &str,
        exec_id: &str,
        spec_json: Vec<u8>,
    ) -> (Result<u32, String>, std::fs::File) {
        if exec_id.is_empty() {
            return self
                .create_with(id, spec_json, ContainerOptions::default())
                .await;
        }
        let (r, w) = nix::unistd::pipe().unwrap();
        let kinds = vec![FdKind::Stdout, FdKind::Stderr];
        let fds: Vec<OwnedFd> = vec![w.try_clone().unwrap(), w];
        let seq = self.send(kinds, fds);
        let req = ExecProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            fd_seq: seq,
            oci_process: spec_json,
            ..Default::default()
        };
        let res = self
            .client
            .exec_process(ttrpc::context::with_timeout(0), &req)
            .await
            .map(|r| r.pid);
        (res.map_err(|e| format!("{e:?}")), std::fs::File::from(r))
    }

    /// Sends one fd batch; returns its number.
    fn send(&self, kinds: Vec<FdKind>, fds: Vec<OwnedFd>) -> u64 {
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        let hdr = FdHeader { seq, fds: kinds };
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        fdpass::send(self.fdpass.as_fd(), &hdr, &borrowed).unwrap();
        seq
    }

    /// CreateContainer with `options` (stdout, stderr and the rootfs).
    async fn create_with(
        &self,
        id: &str,
        spec_json: Vec<u8>,
        options: ContainerOptions,
    ) -> (Result<u32, String>, std::fs::File) {
        let (r, w) = nix::unistd::pipe().unwrap();
        let kinds = vec![FdKind::Stdout, FdKind::Stderr, FdKind::Rootfs];
        let fds: Vec<OwnedFd> = vec![w.try_clone().unwrap(), w, open_tree(self.root.path())];
        let seq = self.send(kinds, fds);
        let req = CreateContainerRequest {
            container_id: id.into(),
            fd_seq: seq,
            oci_spec: spec_json,
            options: Some(options).into(),
            ..Default::default()
        };
        let res = self
            .client
            .create_container(ttrpc::context::with_timeout(0), &req)
            .await
            .map(|r| r.pid);
        (res.map_err(|e| format!("{e:?}")), std::fs::File::from(r))
    }

    async fn start(&self, id: &str, exec_id: &str) {
        let req = StartProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.client
            .start_process(ttrpc::context::with_timeout(0), &req)
            .await
            .unwrap();
    }

    async fn wait(&self, id: &str, exec_id: &str) -> u32 {
        let req = WaitProcessRequest {
            container_id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.client
            .wait_process(ttrpc::context::with_timeout(0), &req)
            .await
            .unwrap()
            .exit_status
    }
}

fn read_all(mut f: std::fs::File) -> String {
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    s
}

/// Runs `rund-agent launch` with `cfg` as the shim does. Returns the
/// connected sandbox and its agent's pid, or the launcher's error.
fn launch_agent(cfg: &LaunchConfig) -> Result<(Sandbox, AgentGuard), String> {
    // The agent is reparented to us when the launcher exits, so we can reap it.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let root = tempfile::tempdir().unwrap();
    busybox_rootfs(root.path());
    let (conn_shim, conn_agent) = std::os::unix::net::UnixStream::pair().unwrap();
    let (fd_shim, fd_agent) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let (sync_shim, sync_agent) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let raw = [
        conn_agent.as_raw_fd(),
        fd_agent.as_raw_fd(),
        sync_agent.as_raw_fd(),
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rund-agent"));
    cmd.arg("launch");
    // SAFETY: only dup2 (async-signal-safe) runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Move the sources above 10 first so dup2 onto 3..5 cannot clobber them.
            let mut tmp = [0; 3];
            for (i, fd) in raw.iter().enumerate() {
                tmp[i] = libc::fcntl(*fd, libc::F_DUPFD, 10);
            }
            for (i, fd) in tmp.iter().enumerate() {
                if libc::dup2(*fd, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for fd in tmp {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let mut launcher = cmd.spawn().unwrap();
    drop(fd_agent);
    drop(sync_agent);
    drop(conn_agent);
    let hdr = FdHeader {
        seq: 0,
        fds: vec![],
    };
    fdpass::send(sync_shim.as_fd(), &hdr, &[]).unwrap();
    launch::send_json(sync_shim.as_fd(), cfg).unwrap();
    // The launcher and the agent share the socket: the agent's Ready may
    // come before the launcher's AgentPid (the shim accepts either order).
    let mut ready = false;
    let agent_pid = loop {
        match launch::recv_json::<SyncMsg>(sync_shim.as_fd()).unwrap() {
            SyncMsg::AgentPid { pid } => break pid,
            SyncMsg::Ready if !ready => ready = true,
            SyncMsg::Error { message } => {
                assert!(!launcher.wait().unwrap().success());
                return Err(message);
            }
            other => panic!("expected AgentPid (or one Ready), got {other:?}"),
        }
    };
    let guard = AgentGuard(agent_pid);
    assert!(launcher.wait().unwrap().success());
    if !ready {
        assert_eq!(
            launch::recv_json::<SyncMsg>(sync_shim.as_fd()).unwrap(),
            SyncMsg::Ready
        );
    }
    assert!(matches!(
        launch::recv_json::<SyncMsg>(sync_shim.as_fd()),
        Err(launch::SyncError::Closed)
    ));
    let client = rund_proto::conn::client(conn_shim.into()).unwrap();
    let sb = Sandbox {
        client: AgentClient::new(client),
        fdpass: fd_shim,
        root,
        seq: Default::default(),
    };
    Ok((sb, guard))
}

fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        rund_skip::skip!("needs root");
    }
    if !Path::new(BUSYBOX).exists() {
        rund_skip::skip!("{BUSYBOX} missing (apt-get install busybox-static)");
    }
    true
}

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
