//! The gate and its node-wide cache: one check per device under concurrency (threads and
//! processes), TTL expiry, corrupt files rebuilt, policy outcomes, and the real backend
//! under `require`.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rund_check::engine::params::WriteBwParams;
use rund_check::gate::cache::{Cache, CachedResult, Entry, Lookup, CACHE_VERSION};
use rund_check::gate::policy::{gbps_to_mib, parse_rate_gbps};
use rund_check::{
    BwReport, CheckError, DeviceChecker, Gate, GateConfig, GateError, GatePolicy, ReportUnit,
    Threshold, Verdict, Verify,
};

/// Counts measurements (in memory, and optionally in a shared file for processes).
struct Counting {
    calls: AtomicUsize,
    bw: f64,
    rate_gbps: Option<f64>,
    log: Option<PathBuf>,
    state: std::sync::Mutex<Option<String>>,
}

fn report(bw: f64) -> BwReport {
    BwReport {
        bytes: 65536,
        iterations: 5000,
        bw_peak: bw + 1.0,
        bw_average: bw,
        msg_rate_mpps: bw / 65536.0 * 1.048576,
        unit: ReportUnit::MiB,
        elapsed_ns: 1,
        gid_index: None,
    }
}

impl DeviceChecker for Counting {
    fn measure(&self, device: &str, _p: &WriteBwParams) -> Result<BwReport, CheckError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(log) = &self.log {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            writeln!(f, "{device} {}", std::process::id()).unwrap();
        }
        // Widen the race window; nothing asserts on time.
        std::thread::sleep(Duration::from_millis(100));
        Ok(report(self.bw))
    }
    fn rated_mib_per_sec(&self, _device: &str, _port: u8) -> Option<f64> {
        self.rate_gbps.map(gbps_to_mib)
    }
    fn port_state(&self, _device: &str, _port: u8) -> Option<String> {
        self.state.lock().unwrap().clone()
    }
}

fn counting(bw: f64) -> Arc<Counting> {
    Arc::new(Counting {
        calls: AtomicUsize::new(0),
        bw,
        rate_gbps: Some(100.0),
        log: None,
        state: Default::default(),
    })
}

#[test]
fn a_port_that_went_down_is_refused_despite_a_cached_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let c = counting(11000.0);
    let gate = Gate::with_checker(&cfg(tmp.path()), c.clone());
    let p = policy(Threshold::MiBps(100.0));
    *c.state.lock().unwrap() = Some("ACTIVE".into());
    assert_eq!(gate.ensure("mlx5_0", &p).unwrap().verdict, Verdict::Pass);
    *c.state.lock().unwrap() = Some("DOWN".into());
    let err = gate.ensure("mlx5_0", &p).unwrap_err().to_string();
    assert!(err.contains("port 1 of mlx5_0 is DOWN"), "{err}");
    assert_eq!(
        c.calls.load(Ordering::SeqCst),
        1,
        "a down port is not measured"
    );
    *c.state.lock().unwrap() = Some("ACTIVE".into());
    let o = gate.ensure("mlx5_0", &p).unwrap();
    assert!(o.from_cache, "the pass is still cached");
}

fn cfg(dir: &Path) -> GateConfig {
    GateConfig {
        state_dir: dir.join("checks"),
    }
}

fn policy(threshold: Threshold) -> GatePolicy {
    GatePolicy {
        threshold,
        ..Default::default()
    }
}

#[test]
fn fifty_concurrent_requests_run_each_device_once() {
    let tmp = tempfile::tempdir().unwrap();
    let c = counting(11000.0);
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let (c, config) = (c.clone(), cfg(tmp.path()));
            std::thread::spawn(move || {
                // A Gate per request: separate lock fds, as separate shims would have.
                let gate = Gate::with_checker(&config, c);
                let dev = if i % 2 == 0 { "mlx5_0" } else { "mlx5_1" };
                gate.ensure(dev, &policy(Threshold::FractionOfRate(0.8)))
                    .unwrap()
            })
        })
        .collect();
    let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(c.calls.load(Ordering::SeqCst), 2, "one check per device");
    assert!(outs.iter().all(|o| o.verdict == Verdict::Pass));
    assert_eq!(outs.iter().filter(|o| !o.from_cache).count(), 2);
    // 80% of 100 Gb/s = 9536.74 MiB/s.
    let t = outs[0].threshold_mib.unwrap();
    assert!((t - 0.8 * 100e9 / 8.0 / 1_048_576.0).abs() < 1e-6);
    assert!(outs[0].annotations()[0].1.contains("11000.00 MiB/s"));
}

/// Child side of the process test (run only when the parent sets the env).
#[test]
#[ignore]
fn child_process_gate_request() {
    let (Ok(dir), Ok(log)) = (
        std::env::var("RUND_CHECK_CHILD_DIR"),
        std::env::var("RUND_CHECK_CHILD_LOG"),
    ) else {
        return;
    };
    let c = Arc::new(Counting {
        calls: AtomicUsize::new(0),
        bw: 11000.0,
        rate_gbps: Some(100.0),
        log: Some(log.into()),
        state: Default::default(),
    });
    let gate = Gate::with_checker(
        &GateConfig {
            state_dir: dir.into(),
        },
        c,
    );
    gate.ensure("mlx5_0", &policy(Threshold::MiBps(5000.0)))
        .unwrap();
}

#[test]
fn concurrent_processes_share_one_check() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..20)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "child_process_gate_request",
                    "--test-threads=1",
                ])
                .env("RUND_CHECK_CHILD_DIR", tmp.path().join("checks"))
                .env("RUND_CHECK_CHILD_LOG", &log)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let calls = fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls.lines().count(),
        1,
        "one measurement across 20 processes: {calls}"
    );
}

#[test]
fn ttl_expiry_remeasures() {
    let tmp = tempfile::tempdir().unwrap();
    let c = counting(11000.0);
    let gate = Gate::with_checker(&cfg(tmp.path()), c.clone());
    let p = policy(Threshold::MiBps(5000.0));
    assert!(!gate.ensure("mlx5_0", &p).unwrap().from_cache);
    assert!(gate.ensure("mlx5_0", &p).unwrap().from_cache);
    assert_eq!(c.calls.load(Ordering::SeqCst), 1);
    // Age the entry past the TTL (validly sealed), instead of sleeping.
    let cache = Cache::new(tmp.path().join("checks"));
    let old = Entry {
        version: CACHE_VERSION,
        device: "mlx5_0".into(),
        measured_at_unix: 1_000,
        size: p.size,
        iters: p.iters,
        result: CachedResult::Measured(report(11000.0)),
        checksum: String::new(),
    }
    .seal();
    cache.write(&old).unwrap();
    assert!(
        !gate.ensure("mlx5_0", &p).unwrap().from_cache,
        "expired entry is not reused"
    );
    assert_eq!(c.calls.load(Ordering::SeqCst), 2);
    // ttl 0: always measure.
    let p0 = GatePolicy {
        ttl_secs: 0,
        ..p.clone()
    };
    gate.ensure("mlx5_0", &p0).unwrap();
    assert_eq!(c.calls.load(Ordering::SeqCst), 3);
    // Different run parameters do not reuse the entry either.
    gate.ensure("mlx5_0", &GatePolicy { size: 4096, ..p })
        .unwrap();
    assert_eq!(c.calls.load(Ordering::SeqCst), 4);
}

#[test]
fn corrupt_cache_is_discarded_and_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let c = counting(11000.0);
    let gate = Gate::with_checker(&cfg(tmp.path()), c.clone());
    let p = policy(Threshold::MiBps(5000.0));
    let path = tmp.path().join("checks/mlx5_0.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"{\"version\":1,\"device\":\"mlx5_0\",\"meas").unwrap();
    let o = gate.ensure("mlx5_0", &p).unwrap();
    assert!(!o.from_cache);
    assert_eq!(c.calls.load(Ordering::SeqCst), 1);
    // Rebuilt: a valid entry now, reused next time.
    assert!(gate.ensure("mlx5_0", &p).unwrap().from_cache);
    // Tamper with a figure: the checksum catches it, the lie is never used.
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("11000.0", "99999.0");
    fs::write(&path, text).unwrap();
    let o = gate.ensure("mlx5_0", &p).unwrap();
    assert!(!o.from_cache);
    assert_eq!(o.report.unwrap().bw_average, 11000.0);
    assert_eq!(c.calls.load(Ordering::SeqCst), 2);
    // An entry for another device under this name is not trusted either.
    let other = fs::read_to_string(&path)
        .unwrap()
        .replace("\"mlx5_0\"", "\"mlx5_9\"");
    fs::write(&path, other).unwrap();
    assert!(!gate.ensure("mlx5_0", &p).unwrap().from_cache);
    assert_eq!(c.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn require_warn_off_policies() {
    let tmp = tempfile::tempdir().unwrap();
    let slow = counting(3000.0);
    let gate = Gate::with_checker(&cfg(tmp.path()), slow.clone());
    // Below 50% of 100 Gb/s (5960 MiB/s): rejected with the figures.
    let err = gate.ensure("mlx5_0", &GatePolicy::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("3000.00 MiB/s") && msg.contains("threshold 5960.46 MiB/s"),
        "{msg}"
    );
    let warn = GatePolicy {
        verify: Verify::Warn,
        ..Default::default()
    };
    assert_eq!(gate.ensure("mlx5_0", &warn).unwrap().verdict, Verdict::Fail);
    let off = GatePolicy {
        verify: Verify::Off,
        ..Default::default()
    };
    assert_eq!(
        gate.ensure("mlx5_1", &off).unwrap().verdict,
        Verdict::Skipped
    );
    assert!(
        !tmp.path().join("checks/mlx5_1.json").exists(),
        "off measures nothing"
    );
    // A fraction threshold needs a rated speed.
    let norate = Arc::new(Counting {
        calls: AtomicUsize::new(0),
        bw: 11000.0,
        rate_gbps: None,
        log: None,
        state: Default::default(),
    });
    let g2 = Gate::with_checker(&cfg(tmp.path()), norate);
    let e = g2
        .ensure("mlx5_2", &GatePolicy::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unverifiable") && e.contains("no rated speed"),
        "{e}"
    );
    assert!(matches!(
        gate.ensure("../etc", &GatePolicy::default()),
        Err(GateError::InvalidDevice(_))
    ));
}

#[test]
fn require_with_the_real_backend_fails_cleanly_here() {
    use rund_check::verbs::{real::RealProvider, VerbsProvider};
    if RealProvider.device_names().is_ok() {
        rund_skip::skip!("this machine has RDMA devices");
    }
    let tmp = tempfile::tempdir().unwrap();
    let gate = Gate::new(&cfg(tmp.path()));
    let e = gate.ensure("mlx5_0", &GatePolicy::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("no RDMA devices found"), "{msg}");
    // Only the cache entry and its lock file are left, nothing else.
    let mut names: Vec<_> = fs::read_dir(tmp.path().join("checks"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec!["mlx5_0.json", "mlx5_0.lock"]);
}

#[test]
fn rate_and_threshold_parsing() {
    assert_eq!(parse_rate_gbps("100 Gb/sec (4X EDR)\n"), Some(100.0));
    assert_eq!(parse_rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
    assert_eq!(parse_rate_gbps("junk"), None);
    assert_eq!(parse_rate_gbps("0 Gb/sec"), None);
    assert!((gbps_to_mib(100.0) - 11920.928955078125).abs() < 1e-9);
    assert_eq!(
        "80%".parse::<Threshold>().unwrap(),
        Threshold::FractionOfRate(0.8)
    );
    assert_eq!(
        "0.5".parse::<Threshold>().unwrap(),
        Threshold::FractionOfRate(0.5)
    );
    assert_eq!(
        "10000MiB/s".parse::<Threshold>().unwrap(),
        Threshold::MiBps(10000.0)
    );
    assert!("1.5".parse::<Threshold>().is_err());
    let p: GatePolicy =
        serde_json::from_str(r#"{"verify":"warn","threshold":"9000 MiB/s","ttl_secs":60}"#)
            .unwrap();
    assert_eq!(
        (p.verify, p.threshold, p.ttl_secs),
        (Verify::Warn, Threshold::MiBps(9000.0), 60)
    );
    let p: GatePolicy = serde_json::from_str(r#"{"threshold":0.9}"#).unwrap();
    assert_eq!(
        (p.verify, p.threshold),
        (Verify::Require, Threshold::FractionOfRate(0.9))
    );
    assert!(serde_json::from_str::<GatePolicy>(r#"{"verify":"maybe"}"#).is_err());
}

/// Another process reads the entry back: measured figures (arbitrary floats, e.g. soft-RoCE's
/// 42.122885599634444 MiB/s) must parse to the same value, or the checksum rejects a good entry
/// and every Create re-measures.
#[test]
fn measured_floats_survive_the_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("checks")).unwrap();
    let cache = Cache::new(tmp.path().join("checks"));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut floats = vec![42.122885599634444, 39.97834985789562, 0.0006396535977263299];
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        floats.push((x >> 11) as f64 / (1u64 << 53) as f64 * 1e4);
    }
    for bw in floats {
        let mut r = report(bw);
        r.bw_peak = bw * 1.0001;
        r.msg_rate_mpps = bw / 65536.0;
        let e = Entry {
            version: CACHE_VERSION,
            device: "rxe0".into(),
            measured_at_unix: 1_795_524_868,
            size: 65536,
            iters: 300,
            result: CachedResult::Measured(r),
            checksum: String::new(),
        }
        .seal();
        cache.write(&e).unwrap();
        match cache.read("rxe0").unwrap() {
            Lookup::Found(got) => assert_eq!(got, e),
            other => panic!("{bw}: {other:?}"),
        }
    }
}
