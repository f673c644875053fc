//! Helpers of the soft-RoCE suite: the device `make test-rdma-vm` brings up, Debian's
//! `ib_write_bw` as server + client, rund's `write-bw`, and a rootfs that carries perftest.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rund_tests::cmd::{self, CmdOutput};

/// Set by tests/vm/guest.sh once rxe0 is up on dummy0 (the RDMA suite only).
pub const DEV_ENV: &str = "RUND_VM_RDMA_DEV";
pub const ADDR_ENV: &str = "RUND_VM_RDMA_ADDR";
pub const NETDEV_ENV: &str = "RUND_VM_RDMA_NETDEV";

/// The soft-RoCE device of the VM suite.
#[derive(Debug, Clone)]
pub struct SoftRoce {
    pub dev: String,
    pub addr: String,
    pub netdev: String,
}

impl SoftRoce {
    pub fn from_env() -> Option<SoftRoce> {
        Some(SoftRoce {
            dev: std::env::var(DEV_ENV).ok()?,
            addr: std::env::var(ADDR_ENV).ok()?,
            netdev: std::env::var(NETDEV_ENV).ok()?,
        })
    }

    pub fn port_dir(&self) -> PathBuf {
        PathBuf::from(format!("/sys/class/infiniband/{}/ports/1", self.dev))
    }

    /// The port state as sysfs names it (`ACTIVE`, `DOWN`).
    pub fn port_state(&self) -> String {
        let s = std::fs::read_to_string(self.port_dir().join("state")).unwrap();
        s.trim().split_once(':').unwrap().1.trim().to_owned()
    }

    /// `ip link set <netdev> up|down`, then waits until the port follows.
    pub fn set_link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        let out = sh(&["ip", "link", "set", &self.netdev, state]);
        assert!(out.success(), "{out:?}");
        let want = if up { "ACTIVE" } else { "DOWN" };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.port_state() != want {
            assert!(Instant::now() < deadline, "port never became {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Brings the link back up when a test that took it down ends, even by a panic.
pub struct LinkGuard<'a>(pub &'a SoftRoce);

impl Drop for LinkGuard<'_> {
    fn drop(&mut self) {
        if self.0.port_state() != "ACTIVE" {
            self.0.set_link(true);
        }
    }
}

pub fn sh(argv: &[&str]) -> CmdOutput {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..]);
    cmd::run(c, None, Duration::from_secs(120)).unwrap()
}

/// One line of a bandwidth report.
#[derive(Debug, Clone, PartialEq)]
pub struct BwLine {
    pub bytes: u64,
    pub iterations: u64,
    pub bw_average: f64,
}

/// The result lines of perftest's report (`#bytes #iterations peak average msgrate`, MiB/s).
/// perftest prints BW with 2 decimals: a small figure (2-byte messages in a slow VM) reads
/// "0.00", so below 1 MiB/s it is taken from the message rate (6 decimals), which perftest
/// computes over the same interval (BW = rate × size).
pub fn perftest_lines(out: &str) -> Vec<BwLine> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 {
                return None;
            }
            let bytes: u64 = f[0].parse().ok()?;
            let printed: f64 = f[3].parse().ok()?;
            let mpps: f64 = f[4].parse().ok()?;
            let bw_average = if printed >= 1.0 {
                printed
            } else {
                mpps * 1e6 * bytes as f64 / 1_048_576.0
            };
            Some(BwLine {
                bytes,
                iterations: f[1].parse().ok()?,
                bw_average,
            })
        })
        .collect()
}

/// The local GID perftest printed (` GID: 00:00:...:255:255:10:99:00:01`, decimal bytes).
pub fn perftest_local_gid(out: &str) -> Option<[u8; 16]> {
    let line = out.lines().find(|l| l.trim_start().starts_with("GID:"))?;
    let bytes: Vec<u8> = line
        .trim_start()
        .trim_start_matches("GID:")
        .trim()
        .split(':')
        .map(|b| b.parse().ok())
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

/// A GID as sysfs prints it, as bytes.
pub fn sysfs_gid(text: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, g) in text.trim().split(':').enumerate() {
        let v = u16::from_str_radix(g, 16).unwrap();
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    out
}

/// A perftest server started in the background; killed (by pid) if still running on drop.
pub struct Server {
    child: Child,
    pub log: PathBuf,
}

impl Server {
    pub fn start(dev: &str, port: u16, args: &[&str], log: &Path) -> Server {
        let f = std::fs::File::create(log).unwrap();
        let child = Command::new("ib_write_bw")
            .args(["-d", dev, "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("ib_write_bw (Debian package perftest)");
        Server {
            child,
            log: log.to_owned(),
        }
    }

    /// Waits for the server to exit; its output.
    pub fn finish(mut self, timeout: Duration) -> (bool, String) {
        let deadline = Instant::now() + timeout;
        let ok = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st.success();
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        (ok, std::fs::read_to_string(&self.log).unwrap_or_default())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `client` until it connects (the server listens only once it printed its banner).
pub fn client_until_connected(mut client: impl FnMut() -> CmdOutput) -> CmdOutput {
    for _ in 0..60 {
        let out = client();
        let text = format!("{}{}", out.stdout, out.stderr);
        if out.success() || !text.contains("Couldn't connect") {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("ib_write_bw never connected to its server");
}

/// perftest's clock calibration was too noisy to report (common under TCG).
pub fn calibration_failed(output: &str) -> bool {
    output.contains("Can't produce a report")
}

/// Debian's ib_write_bw as server and client over `addr` with the same `args`: the client's report.
/// perftest refuses to report when its CPU clock calibration is noisy ("Can't produce a
/// report", common under TCG on a busy host): that run is repeated, up to three times.
pub fn ib_write_bw_pair(sr: &SoftRoce, port: u16, args: &[&str], log_dir: &Path) -> String {
    for attempt in 0..3u16 {
        let port = port + 100 * attempt;
        let log = log_dir.join(format!("server-{port}.log"));
        let server = Server::start(&sr.dev, port, args, &log);
        let client = client_until_connected(|| {
            let mut c = Command::new("ib_write_bw");
            c.args(["-d", &sr.dev, "-p", &port.to_string()])
                .args(args)
                .arg(&sr.addr);
            cmd::run(c, None, Duration::from_secs(300)).unwrap()
        });
        let (ok, server_out) = server.finish(Duration::from_secs(60));
        if calibration_failed(&client.stderr) || calibration_failed(&server_out) {
            eprintln!("ib_write_bw {args:?}: perftest's clock calibration failed; again");
            continue;
        }
        assert!(client.success(), "ib_write_bw client {args:?}: {client:?}");
        assert!(ok, "ib_write_bw server {args:?}: {server_out}");
        return client.stdout;
    }
    panic!("ib_write_bw {args:?}: no report in three runs");
}

/// `rund check write-bw -d <dev> <args> --json`: the device's result lines and GID index.
pub fn rund_write_bw(rund: &Path, dev: &str, args: &[&str]) -> (Vec<BwLine>, Option<u32>) {
    let mut c = Command::new(rund);
    c.args(["check", "write-bw", "-d", dev, "--json"])
        .args(args);
    let out = cmd::run(c, None, Duration::from_secs(300)).unwrap();
    assert!(out.success(), "rund check write-bw {args:?}: {out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let d = &v[0];
    assert_eq!(d["device"], dev, "{v}");
    assert!(d["error"].is_null(), "{v}");
    let results = d["results"].as_array().unwrap();
    let lines = results
        .iter()
        .map(|r| {
            assert_eq!(r["unit"], "MiB/s", "{r}");
            BwLine {
                bytes: r["bytes"].as_u64().unwrap(),
                iterations: r["iterations"].as_u64().unwrap(),
                bw_average: r["bw_average"].as_f64().unwrap(),
            }
        })
        .collect();
    let gid = results
        .first()
        .and_then(|r| r["gid_index"].as_u64())
        .map(|g| g as u32);
    (lines, gid)
}

/// The shared objects `ldd` names for `file` (absolute paths, the loader included).
fn ldd(file: &Path) -> Vec<PathBuf> {
    let out = sh(&["ldd", &file.display().to_string()]);
    assert!(out.success(), "{out:?}");
    out.stdout
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = l.split_once("=> ").map_or(l, |(_, r)| r);
            let p = p.split_whitespace().next()?;
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

fn copy_into(root: &Path, file: &Path) {
    let dst = root.join(file.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    // fs::copy follows symlinks: the rootfs gets the library under the name asked for.
    std::fs::copy(file, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
}

const PROVIDER_DIR: &str = "/usr/lib/x86_64-linux-gnu/libibverbs";

/// A busybox rootfs plus ib_write_bw, its libraries, libibverbs' driver files and providers,
/// all copied from this (VM) host.
pub fn perftest_rootfs(dir: &Path) -> PathBuf {
    rund_tests::busybox_rootfs(dir).unwrap();
    let bin = PathBuf::from("/usr/bin/ib_write_bw");
    let mut files = vec![bin.clone()];
    files.extend(ldd(&bin));
    for e in std::fs::read_dir(PROVIDER_DIR).unwrap() {
        let p = e.unwrap().path();
        files.extend(ldd(&p));
        files.push(p);
    }
    for e in std::fs::read_dir("/etc/libibverbs.d").unwrap() {
        files.push(e.unwrap().path());
    }
    files.sort();
    files.dedup();
    for f in &files {
        copy_into(dir, f);
    }
    dir.to_owned()
}

pub fn major_minor(path: &str) -> (i64, i64) {
    let d = std::fs::metadata(path).unwrap().rdev();
    let major = ((d >> 8) & 0xfff) | ((d >> 32) & !0xfff);
    let minor = (d & 0xff) | ((d >> 12) & !0xff);
    (major as i64, minor as i64)
}

/// `/dev/infiniband/uverbsN` of `dev`, from `/sys/class/infiniband_verbs/*/ibdev`.
pub fn uverbs_of(dev: &str) -> String {
    for e in std::fs::read_dir("/sys/class/infiniband_verbs").unwrap() {
        let e = e.unwrap();
        let ibdev = std::fs::read_to_string(e.path().join("ibdev")).unwrap_or_default();
        if ibdev.trim() == dev {
            return format!("/dev/infiniband/{}", e.file_name().to_string_lossy());
        }
    }
    panic!("no uverbs node for {dev}");
}

/// Waits until something listens on TCP `port` (the perftest server's banner goes to a
/// block-buffered file, so its log cannot tell).
pub fn wait_listening(port: u16) {
    for _ in 0..600 {
        let out = sh(&["ss", "-Hltn", &format!("sport = :{port}")]);
        if out.success() && !out.stdout.trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on port {port}");
}

/// The cache entry's identity: a re-measurement replaces the file.
pub fn entry_id(path: &Path) -> (u64, i64, i64, String) {
    let m = std::fs::metadata(path).unwrap();
    (
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        std::fs::read_to_string(path).unwrap(),
    )
}
