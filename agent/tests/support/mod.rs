//! Shared by the agent's root integration tests: runs `rund-agent launch`
//! the way the shim does and drives containers through the ttrpc API with
//! a busybox rootfs.
#![allow(dead_code)]

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

pub const BUSYBOX: &str = "/bin/busybox";

/// Kills the agent if the test ends early.
pub struct AgentGuard(pub i32);

impl Drop for AgentGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            let _ =
                nix::sys::signal::kill(Pid::from_raw(self.0), nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(Pid::from_raw(self.0), None);
        }
    }
}

pub fn busybox_rootfs(dir: &Path) {
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

pub fn open_tree(path: &Path) -> OwnedFd {
    rund_sys::mount::clone_path(path, true).expect("open_tree")
}

pub fn spec(args: &[&str]) -> Vec<u8> {
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

pub struct Sandbox {
    pub client: AgentClient,
    pub fdpass: OwnedFd,
    pub root: tempfile::TempDir,
    pub seq: std::cell::Cell<u64>,
}

impl Sandbox {
    /// Sends the fds, then CreateProcess. Returns the read end of stdout.
    pub async fn create(
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
    pub fn send(&self, kinds: Vec<FdKind>, fds: Vec<OwnedFd>) -> u64 {
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        let hdr = FdHeader { seq, fds: kinds };
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        fdpass::send(self.fdpass.as_fd(), &hdr, &borrowed).unwrap();
        seq
    }

    /// CreateContainer with `options` (stdout, stderr and the rootfs).
    pub async fn create_with(
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

    pub async fn start(&self, id: &str, exec_id: &str) {
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

    pub async fn wait(&self, id: &str, exec_id: &str) -> u32 {
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

pub fn read_all(mut f: std::fs::File) -> String {
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    s
}

/// Runs `rund-agent launch` with `cfg` as the shim does. Returns the
/// connected sandbox and its agent's pid, or the launcher's error.
pub fn launch_agent(cfg: &LaunchConfig) -> Result<(Sandbox, AgentGuard), String> {
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

pub fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        rund_skip::skip!("needs root");
    }
    if !Path::new(BUSYBOX).exists() {
        rund_skip::skip!("{BUSYBOX} missing (apt-get install busybox-static)");
    }
    true
}
