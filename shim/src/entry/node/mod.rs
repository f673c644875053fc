//! Per-node mode (`[shim] mode = "per-node"`): one shim process serves every
//! pod of a containerd namespace, each pod on its own socket, so a pod costs
//! its agent and inits, not a process of its own.
//!
//! `start` takes the node lock, connects to the node's control socket
//! (starting the node's shim if none listens) and hands over the pod
//! ([`wire::PodRequest`]); the node answers once the pod's socket listens.
//! The node's shim leaves when it has served no pod for a while, under the
//! same lock, so a `start` never hands a pod to a shim on its way out.

pub mod keeper;
pub mod server;
pub mod wire;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::error::EntryError;
use super::flags::{self, Flags};

/// Not a container id (containerd allows none with a space), so never a pod's.
const NODE_ID: &str = "rund node";
/// How long `start` waits for the node to serve a pod: a socket bind.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// The node shim's control socket for this containerd, namespace and rund
/// config: pods whose runtime handlers name different configs get a node
/// each, so no pod runs under another handler's config.
pub fn control_path(flags: &Flags, config_path: Option<&str>) -> String {
    let key = match config_path {
        Some(p) => format!("{NODE_ID} {p}"),
        None => NODE_ID.to_string(),
    };
    flags::socket_address(&flags.address, &flags.namespace, &key)
        .trim_start_matches("unix://")
        .to_string()
}

/// Has the node's shim serve the pod at `address`, starting it if needed.
pub fn hand_over(
    flags: &Flags,
    state_dir: &Path,
    address: &str,
    config_path: Option<String>,
) -> Result<(), EntryError> {
    let control = control_path(flags, config_path.as_deref());
    // Hand-overs to a running node share the lock (a burst of starts must
    // not queue on it); only starting the node takes it alone.
    let shared = NodeLock::share(&control)?;
    let (stream, _lock) = match UnixStream::connect(&control) {
        Ok(s) => (s, shared),
        Err(_) => {
            drop(shared);
            let alone = NodeLock::take(&control)?;
            let s = match UnixStream::connect(&control) {
                Ok(s) => s,
                Err(_) => {
                    spawn(flags, state_dir, &control)?;
                    UnixStream::connect(&control).map_err(node_err("connect"))?
                }
            };
            (s, alone)
        }
    };
    let req = wire::PodRequest {
        socket: address.to_string(),
        namespace: flags.namespace.clone(),
        config_path,
        debug: flags.debug,
    };
    stream
        .set_read_timeout(Some(ANSWER_LIMIT))
        .map_err(node_err("timeout"))?;
    (&stream)
        .write_all(req.line().as_bytes())
        .map_err(node_err("send"))?;
    let mut reply = String::new();
    BufReader::new(stream.take(wire::MAX_LINE as u64))
        .read_line(&mut reply)
        .map_err(node_err("answer"))?;
    wire::reply_result(&reply).map_err(EntryError::Node)
}

fn spawn(flags: &Flags, state_dir: &Path, control: &str) -> Result<(), EntryError> {
    let (flags, path) = (flags.clone(), control.to_string());
    let log = log_path(state_dir, control);
    let (child, out) =
        super::start::fork_server(move || keeper::main(flags, path, log, server::main))?;
    super::start::await_listening(child, out, control)
}

/// `<state_dir>/node-<hash>.log`, the hash being the control socket's name.
fn log_path(state_dir: &Path, control: &str) -> PathBuf {
    let name = Path::new(control)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    state_dir.join(format!("node-{name}.log"))
}

fn node_err(op: &'static str) -> impl FnOnce(std::io::Error) -> EntryError {
    move |e| EntryError::Node(format!("node shim: {op}: {e}"))
}

/// Removes a node's control socket and lock file when no `start` holds the
/// lock (one that does finds no socket and starts the next node).
pub fn remove_node_files(control: &str) {
    if let Ok(Some(lock)) = NodeLock::try_take(control) {
        let _ = std::fs::remove_file(control);
        lock.remove();
    }
}

/// The lock beside the control socket: held shared while a pod is handed
/// over, alone while the node is started and while it decides to leave.
pub struct NodeLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl NodeLock {
    /// Waits for the lock.
    pub fn take(control: &str) -> Result<NodeLock, EntryError> {
        Self::wait(control, FlockArg::LockExclusive)
    }

    /// Waits for the lock, shared with other holders of it shared.
    pub fn share(control: &str) -> Result<NodeLock, EntryError> {
        Self::wait(control, FlockArg::LockShared)
    }

    fn wait(control: &str, how: FlockArg) -> Result<NodeLock, EntryError> {
        Self::lock(control, how)?
            .ok_or_else(|| EntryError::Node("node lock: a blocking lock would block".into()))
    }

    /// The lock if nobody holds it, else `None`.
    pub fn try_take(control: &str) -> Result<Option<NodeLock>, EntryError> {
        Self::lock(control, FlockArg::LockExclusiveNonblock)
    }

    fn lock(control: &str, how: FlockArg) -> Result<Option<NodeLock>, EntryError> {
        let path = PathBuf::from(format!("{control}.lock"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(node_err("lock dir"))?;
        }
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)
                .map_err(node_err("lock"))?;
            let lock = match Flock::lock(file, how) {
                Ok(l) => l,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                Err((_, e)) => return Err(node_err("lock")(e.into())),
            };
            // A leaving node removes the file while it holds it: lock the
            // file that is there now, not the one it unlinked.
            let held = lock.metadata().map_err(node_err("lock"))?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Some(NodeLock { _lock: lock, path }));
                }
                _ => continue,
            }
        }
    }

    /// Removes the lock file; the lock is still held until drop.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_socket_is_per_containerd_and_namespace() {
        let f = |address: &str, namespace: &str| Flags {
            address: address.into(),
            namespace: namespace.into(),
            ..Flags::default()
        };
        let a = control_path(&f("/run/containerd/containerd.sock", "k8s.io"), None);
        assert!(a.starts_with("/run/containerd/s/"), "{a}");
        assert_ne!(
            a,
            control_path(&f("/run/containerd/containerd.sock", "default"), None)
        );
        assert_ne!(a, control_path(&f("/tmp/other.sock", "k8s.io"), None));
        let b = control_path(
            &f("/run/containerd/containerd.sock", "k8s.io"),
            Some("/b.toml"),
        );
        assert_ne!(a, b, "another config, another node");
        assert_eq!(
            b,
            control_path(
                &f("/run/containerd/containerd.sock", "k8s.io"),
                Some("/b.toml")
            )
        );
        assert_eq!(
            log_path(Path::new("/run/rund"), &a),
            PathBuf::from(format!("/run/rund/node-{}.log", &a[18..]))
        );
    }

    #[test]
    fn try_take_does_not_wait_for_a_held_lock() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("ctl").display().to_string();
        let held = NodeLock::take(&control).unwrap();
        assert!(NodeLock::try_take(&control).unwrap().is_none());
        drop(held);
        assert!(NodeLock::try_take(&control).unwrap().is_some());
    }

    #[test]
    fn hand_overs_share_the_lock_and_keep_the_node_from_leaving() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("ctl").display().to_string();
        let a = NodeLock::share(&control).unwrap();
        let b = NodeLock::share(&control).unwrap();
        assert!(NodeLock::try_take(&control).unwrap().is_none());
        drop(a);
        assert!(NodeLock::try_take(&control).unwrap().is_none());
        drop(b);
        assert!(NodeLock::try_take(&control).unwrap().is_some());
    }

    #[test]
    fn a_removed_lock_file_is_not_the_one_locked() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("ctl").display().to_string();
        let first = NodeLock::take(&control).unwrap();
        let waiter = std::thread::spawn({
            let control = control.clone();
            move || NodeLock::take(&control).unwrap()
        });
        std::thread::sleep(Duration::from_millis(100));
        first.remove();
        drop(first);
        // The waiter got the unlinked file's lock first, saw it gone, and
        // holds a lock on the file now at the path.
        let second = waiter.join().unwrap();
        let held = second._lock.metadata().unwrap();
        let now = std::fs::metadata(&second.path).expect("a lock file at the path");
        assert_eq!((held.dev(), held.ino()), (now.dev(), now.ino()));
    }
}
