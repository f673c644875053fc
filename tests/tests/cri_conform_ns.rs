//! CRI conformance, namespaces and pod sysctls, for both runtime handlers (runc the reference,
//! rund with its default config):
//!
//! - hostIPC: a SysV segment the node makes is seen in the container, a message queue and a
//!   /dev/shm file the container makes are seen on the node; a pod without hostIPC sees none;
//! - shareProcessNamespace: the pod's containers see each other's processes; exec works in each;
//! - hostPID: the container sees the node's processes (this test's own pid, its own sleep) and
//!   the node's init as PID 1, and sits in the node's pid namespace (one NSpid level); exec
//!   works;
//! - ContainerPID: PID 1 of a container is its own command;
//! - pod sysctls, a safe one and an unsafe one, are seen in the containers, not on the node.

use std::ffi::CString;

use rund_tests::cri::{CriFixture, Handler};
use rund_tests::{per_handler, ContainerSpec, ContainerdOpts, BUSYBOX_IMAGE};

const SLEEPER: &[&str] = &["sleep", "100000"];

fn start(h: Handler, test: &str) -> Option<CriFixture> {
    CriFixture::start(h, test, ContainerdOpts::new())
}

/// Command lines of every process the container sees, one per line, args joined by spaces.
const PS: &str = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done";

/// A SysV shared memory segment of the node's IPC namespace, removed on drop.
struct NodeShm {
    id: i32,
    key: i32,
}

impl NodeShm {
    /// `salt` tells apart the tests of one process (they run in parallel).
    fn new(salt: i32) -> NodeShm {
        // A key unlikely to clash with parallel tests: the pid and the salt.
        let key = 0x5200_0000 | ((std::process::id() as i32 & 0xfffff) << 4) | (salt & 0xf);
        // SAFETY: plain syscall wrapper; no pointers.
        let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        NodeShm { id, key }
    }
}

impl Drop for NodeShm {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID takes no buffer.
        unsafe { libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// Whether the node's IPC namespace has a POSIX message queue `/name`; unlinks it.
fn node_has_mqueue(name: &str) -> bool {
    let c = CString::new(format!("/{name}")).unwrap();
    // SAFETY: `c` is a valid C string; no attributes are passed without O_CREAT.
    let q = unsafe { libc::mq_open(c.as_ptr(), libc::O_RDONLY) };
    if q < 0 {
        return false;
    }
    // SAFETY: `q` is the descriptor just opened; `c` is valid.
    unsafe {
        libc::mq_close(q);
        libc::mq_unlink(c.as_ptr());
    }
    true
}

fn host_ipc(h: Handler) {
    let Some(mut fx) = start(h, "host_ipc") else {
        return;
    };
    let shm = NodeShm::new(h as i32);
    let key = format!("{}", shm.key);
    let tag = format!("rit-{}-{}", std::process::id(), h.name());

    let mut pod = fx.pod_spec("hostipc");
    pod.host_ipc = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let c = fx
        .run(
            &pod_id,
            &ContainerSpec::new("app", BUSYBOX_IMAGE, SLEEPER),
            &pod,
        )
        .expect("hostIPC container");
    let segs = fx.sh_ok(&c, "cat /proc/sysvipc/shm");
    assert!(
        segs.split_whitespace().any(|w| w == key),
        "{}: the node's segment {key} in\n{segs}",
        h.name()
    );
    fx.sh_ok(
        &c,
        &format!("touch /dev/mqueue/{tag} && echo x > /dev/shm/{tag}"),
    );
    let shm_file = std::path::Path::new("/dev/shm").join(&tag);
    let on_node = std::fs::read_to_string(&shm_file);
    let _ = std::fs::remove_file(&shm_file);
    assert!(
        node_has_mqueue(&tag),
        "{}: queue {tag} on the node",
        h.name()
    );
    assert_eq!(
        on_node.ok().as_deref(),
        Some("x\n"),
        "{}: /dev/shm/{tag}",
        h.name()
    );

    // The control: a pod of its own IPC namespace sees nothing of the node's.
    let own = fx.pod_spec("ownipc");
    let own_id = fx.run_pod(&own).expect("RunPodSandbox");
    let o = fx
        .run(
            &own_id,
            &ContainerSpec::new("app", BUSYBOX_IMAGE, SLEEPER),
            &own,
        )
        .expect("container");
    let segs = fx.sh_ok(&o, "cat /proc/sysvipc/shm");
    assert!(
        !segs.split_whitespace().any(|w| w == key),
        "{}: {segs}",
        h.name()
    );
    drop(shm);
    fx.finish();
}

fn share_process_namespace(h: Handler) {
    let Some(mut fx) = start(h, "share_process_namespace") else {
        return;
    };
    let mut pod = fx.pod_spec("sharedpid");
    pod.share_process_namespace = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let a = ContainerSpec::new("a", BUSYBOX_IMAGE, &["sleep", "200001"]);
    let b = ContainerSpec::new("b", BUSYBOX_IMAGE, &["sleep", "200002"]);
    let a = fx.run(&pod_id, &a, &pod).expect("a");
    let b = fx.run(&pod_id, &b, &pod).expect("b");
    for (id, other) in [(&a, "sleep 200002"), (&b, "sleep 200001")] {
        let ps = fx.sh_ok(id, PS);
        assert!(
            ps.lines().any(|l| l.trim() == other),
            "{}: {other:?} in\n{ps}",
            h.name()
        );
        // Each exec runs in its own container: the rootfs is the container's.
        fx.sh_ok(id, &format!("echo {id} > /tmp/me"));
        assert_eq!(fx.sh_ok(id, "cat /tmp/me").trim(), id.as_str());
    }
    // Neither workload is the namespace's PID 1: the pod's (pause) is.
    let one = fx.sh_ok(&a, "tr '\\0' ' ' < /proc/1/cmdline");
    assert!(!one.contains("20000"), "{}: PID 1 is {one:?}", h.name());
    fx.finish();
}

fn host_pid(h: Handler) {
    let Some(mut fx) = start(h, "host_pid") else {
        return;
    };
    let mut pod = fx.pod_spec("hostpid");
    pod.host_pid = true;
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let c = fx
        .run(
            &pod_id,
            &ContainerSpec::new("app", BUSYBOX_IMAGE, SLEEPER),
            &pod,
        )
        .expect("hostPID container");
    let me = std::process::id();
    let mine = std::fs::read_to_string("/proc/self/cmdline").unwrap();
    let seen = fx.sh_ok(&c, &format!("cat /proc/{me}/cmdline"));
    assert_eq!(
        seen,
        mine,
        "{}: this test (pid {me}) as seen inside",
        h.name()
    );
    let init = std::fs::read("/proc/1/cmdline").unwrap();
    let one = fx.exec(&c, &["cat", "/proc/1/cmdline"]);
    assert_eq!(
        one.stdout.as_bytes(),
        init.as_slice(),
        "{}: PID 1 must be the node's init",
        h.name()
    );
    let ps = fx.sh_ok(&c, PS);
    assert!(ps.lines().any(|l| l.trim() == "sleep 100000"), "{ps}");
    // The container's processes live in the node's pid namespace: one level of NSpid.
    let nspid = fx.sh_ok(&c, "grep NSpid /proc/self/status");
    assert_eq!(nspid.split_whitespace().count(), 2, "{}: {nspid}", h.name());
    fx.finish();
}

fn container_pid(h: Handler) {
    let Some(mut fx) = start(h, "container_pid") else {
        return;
    };
    let pod = fx.pod_spec("ctrpid");
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    let plain = ContainerSpec::new("plain", BUSYBOX_IMAGE, &["sleep", "300001"]);
    let shell = ContainerSpec::new("shell", BUSYBOX_IMAGE, &["sh", "-c", "sleep 300002 & wait"]);
    let p = fx.run(&pod_id, &plain, &pod).expect("plain");
    let s = fx.run(&pod_id, &shell, &pod).expect("shell");
    for (id, want) in [
        (&p, "sleep\x00300001\0"),
        (&s, "sh\0-c\0sleep 300002 & wait\0"),
    ] {
        let r = fx.exec(id, &["cat", "/proc/1/cmdline"]);
        assert_eq!(r.stdout, want, "{}: /proc/1/cmdline", h.name());
    }
    fx.finish();
}

fn pod_sysctls(h: Handler) {
    let Some(mut fx) = start(h, "pod_sysctls") else {
        return;
    };
    let node = |k: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{k}")).unwrap();
    let (rmid, msgmax) = (node("shm_rmid_forced"), node("msgmax"));
    let mut pod = fx.pod_spec("sysctls");
    pod.sysctls
        .insert("kernel.shm_rmid_forced".into(), "1".into());
    pod.sysctls.insert("kernel.msgmax".into(), "100".into());
    let pod_id = fx.run_pod(&pod).expect("RunPodSandbox");
    for name in ["a", "b"] {
        let c = fx
            .run(
                &pod_id,
                &ContainerSpec::new(name, BUSYBOX_IMAGE, SLEEPER),
                &pod,
            )
            .expect("container");
        let got = fx.sh_ok(
            &c,
            "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmax",
        );
        assert_eq!(got, "1\n100\n", "{}: container {name}", h.name());
    }
    assert_eq!(node("shm_rmid_forced"), rmid, "{}: node changed", h.name());
    assert_eq!(node("msgmax"), msgmax, "{}: node changed", h.name());
    fx.finish();
}

per_handler!(
    host_ipc,
    share_process_namespace,
    host_pid,
    container_pid,
    pod_sysctls,
);
