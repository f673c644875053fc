//! A hung volume: a FUSE filesystem (spoken directly on /dev/fuse) whose lookups never answer,
//! as a dead NFS server's. It answers INIT and the root's GETATTR, refuses everything else with
//! ENOSYS (so stat of the mount point works), and leaves every LOOKUP pending: a path below its
//! root blocks until [`HungVolume::release`] (or drop) aborts the connection. The requests it
//! received are recorded, so a test knows when something is stuck in it. A request the server
//! has read is waited for uninterruptibly: release the volume before waiting for (or killing)
//! a process stuck on it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::error::{IoContext, Result};

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_INIT: u32 = 26;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;
const IN_HEADER: usize = 40;

/// One request the volume received: opcode and, for a lookup, the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub opcode: u32,
    pub name: String,
}

pub struct HungVolume {
    pub path: PathBuf,
    seen: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl HungVolume {
    /// Mounts the volume on `path` (created if missing).
    pub fn mount(path: &Path) -> Result<HungVolume> {
        std::fs::create_dir_all(path).ctx("create mount point", path)?;
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .ctx("open", "/dev/fuse")?;
        let data = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        mount(
            Some("rund-hung"),
            path,
            Some("fuse"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .map_err(std::io::Error::from)
        .ctx("mount fuse", path)?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || serve(dev, seen, stop))
        };
        Ok(HungVolume {
            path: path.to_path_buf(),
            seen,
            stop,
            reader: Some(reader),
        })
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().expect("requests").clone()
    }

    /// Waits until a lookup of `name` arrived (something is now stuck on it).
    pub fn wait_lookup(&self, name: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let hit = self
                .requests()
                .iter()
                .any(|r| r.opcode == FUSE_LOOKUP && r.name == name);
            if hit {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Detaches the mount and closes the device: the kernel aborts the connection once its
    /// last fd is gone, and every pending request fails (ENOTCONN).
    pub fn release(&mut self) {
        let _ = umount2(&self.path, MntFlags::MNT_DETACH);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for HungVolume {
    fn drop(&mut self) {
        self.release();
    }
}

/// Answers INIT and the root's GETATTR until `stop`; the device closes when this returns.
fn serve(mut dev: File, seen: Arc<Mutex<Vec<Request>>>, stop: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 1 << 20];
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u8)) {
            Ok(0) | Err(_) => continue,
            Ok(_) => {}
        }
        let n = match dev.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return, // ENODEV: aborted or unmounted
        };
        if n < IN_HEADER {
            continue;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
        let (opcode, unique, nodeid) = (u32_at(4), u64_at(8), u64_at(16));
        let name = if opcode == FUSE_LOOKUP {
            let body = &buf[IN_HEADER..n];
            let end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
            String::from_utf8_lossy(&body[..end]).into_owned()
        } else {
            String::new()
        };
        seen.lock()
            .expect("requests")
            .push(Request { opcode, name });
        let reply = match opcode {
            FUSE_INIT => Some((0, init_out(u32_at(IN_HEADER + 8)))),
            FUSE_GETATTR if nodeid == 1 => Some((0, root_attr())),
            // Pending for good: that is the hang.
            FUSE_LOOKUP => None,
            // No answer is expected.
            FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => None,
            _ => Some((-libc::ENOSYS, Vec::new())),
        };
        if let Some((error, body)) = reply {
            let mut out = Vec::with_capacity(16 + body.len());
            out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
            out.extend_from_slice(&error.to_ne_bytes());
            out.extend_from_slice(&unique.to_ne_bytes());
            out.extend_from_slice(&body);
            let _ = dev.write_all(&out);
        }
    }
}

/// fuse_init_out: protocol 7.31, no feature flags.
fn init_out(max_readahead: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    for v in [7u32, 31, max_readahead, 0] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&16u16.to_ne_bytes()); // max_background
    b.extend_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
    b.extend_from_slice(&4096u32.to_ne_bytes()); // max_write
    b.extend_from_slice(&1u32.to_ne_bytes()); // time_gran
    b.resize(64, 0);
    b
}

/// fuse_attr_out of the root: a 0755 directory, cached for an hour.
fn root_attr() -> Vec<u8> {
    let mut b = Vec::with_capacity(104);
    b.extend_from_slice(&3600u64.to_ne_bytes()); // attr_valid
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    for v in [1u64, 0, 0, 0, 0, 0] {
        b.extend_from_slice(&v.to_ne_bytes()); // ino, size, blocks, a/m/ctime
    }
    for v in [0u32, 0, 0, libc::S_IFDIR | 0o755, 2, 0, 0, 0, 4096, 0] {
        b.extend_from_slice(&v.to_ne_bytes()); // nsecs, mode, nlink, uid, gid, rdev, blksize, flags
    }
    b
}
