//! The memlock preflight (with this machine's real limit) and the real verbs backend, which
//! must report "no RDMA devices found" cleanly here.

use std::io;
use std::sync::Mutex;

use rund_check::engine::params::{SysInfo, WriteBwParams};
use rund_check::memlock::{preflight, MemlockError};
use rund_check::verbs::sim::{SimModel, SimProvider};
use rund_check::verbs::{MemKind, VerbsError, VerbsProvider};
use rund_check::{ProcRlimit, RlimitSource, SimClock, WriteBwRequest};

#[test]
fn seed_case_all_sizes_needs_16_mib_against_this_machines_limit() {
    let r = WriteBwParams {
        run_all: true,
        ..Default::default()
    }
    .resolve(SysInfo::detect())
    .unwrap();
    // INC(8 MiB, cache line) x 2 for any power-of-two cache line.
    assert_eq!(r.buffer_bytes, 16 << 20);
    let (soft, hard) = ProcRlimit.memlock().unwrap();
    let needed = r.buffer_bytes + ProcRlimit.pinned_bytes();
    if hard.is_none_or(|h| h >= needed) {
        rund_skip::skip!("RLIMIT_MEMLOCK here ({soft:?}/{hard:?}) allows {needed} bytes");
    }
    match preflight(r.buffer_bytes, &ProcRlimit) {
        Ok(()) => rund_skip::skip("this process could raise its hard memlock limit"),
        Err(e) => {
            let msg = e.to_string();
            eprintln!("{msg}");
            assert!(msg.contains("16777216 bytes (16 MiB)"), "{msg}");
            let soft = soft.unwrap();
            assert!(
                msg.contains(&format!("{soft} bytes")),
                "names the limit in force: {msg}"
            );
            assert!(msg.contains("LimitMEMLOCK=infinity"), "{msg}");
            assert!(msg.contains("CAP_SYS_RESOURCE"), "{msg}");
        }
    }
    // The default run (128 KiB) fits.
    let d = WriteBwParams::default().resolve(SysInfo::detect()).unwrap();
    assert_eq!(d.buffer_bytes, 128 << 10);
    preflight(d.buffer_bytes, &ProcRlimit).unwrap();
}

/// A fixed limit; records whether a raise was attempted.
struct Fixed {
    soft: Option<u64>,
    hard: Option<u64>,
    allow_raise: bool,
    raised: Mutex<Vec<(Option<u64>, Option<u64>)>>,
}
impl RlimitSource for Fixed {
    fn memlock(&self) -> io::Result<(Option<u64>, Option<u64>)> {
        Ok((self.soft, self.hard))
    }
    fn set_memlock_soft(&self, s: Option<u64>, h: Option<u64>) -> io::Result<()> {
        self.raised.lock().unwrap().push((s, h));
        if self.allow_raise {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        }
    }
    fn pinned_bytes(&self) -> u64 {
        4096
    }
}

fn fixed(soft: u64, hard: u64, allow_raise: bool) -> Fixed {
    Fixed {
        soft: Some(soft),
        hard: Some(hard),
        allow_raise,
        raised: Mutex::new(vec![]),
    }
}

#[test]
fn soft_limit_is_raised_to_hard_when_that_suffices() {
    let f = fixed(64 << 10, 8 << 20, true);
    preflight(128 << 10, &f).unwrap();
    assert_eq!(
        *f.raised.lock().unwrap(),
        vec![(Some(8 << 20), Some(8 << 20))]
    );
}

#[test]
fn shortfall_names_both_numbers_and_counts_pinned_pages() {
    let f = fixed(8 << 20, 8 << 20, false);
    let e = preflight(16 << 20, &f).unwrap_err();
    assert!(
        matches!(e, MemlockError::Shortfall { needed, pinned: 4096, .. } if needed == 16 << 20)
    );
    let msg = e.to_string();
    assert!(
        msg.contains("16777216 bytes (16 MiB)") && msg.contains("8388608 bytes (8 MiB)"),
        "{msg}"
    );
    assert!(msg.contains("already pinned"), "{msg}");
    // Just fits, but the 4 KiB already pinned tips it over.
    assert!(preflight(8 << 20, &f).is_err());
    assert!(preflight((8 << 20) - 4096, &f).is_ok());
}

#[test]
fn shortfall_stops_before_registration() {
    let clock = SimClock::new();
    let prov = SimProvider::new(&["sim0"], clock.clone(), SimModel::default());
    let r = WriteBwParams {
        run_all: true,
        ..Default::default()
    }
    .resolve(SysInfo {
        page_size: 4096,
        cache_line: 64,
    })
    .unwrap();
    let f = fixed(8 << 20, 8 << 20, false);
    let res = {
        let mut dev = prov.open("sim0").unwrap();
        rund_check::run_write_bw(&mut dev, &clock, &r, &f, MemKind::Host)
    };
    assert!(matches!(res, Err(rund_check::CheckError::Memlock(_))));
    let s = prov.stats();
    assert!(
        s.mr_lens.is_empty() && s.qp_caps.is_empty(),
        "nothing registered or created"
    );
    assert_eq!(s.destroyed, vec!["device"], "the device is still closed");
}

#[test]
fn real_backend_reports_no_devices() {
    use rund_check::verbs::real::RealProvider;
    match RealProvider.device_names() {
        Err(VerbsError::NoDevices) => {}
        Ok(d) => rund_skip::skip!("this machine has RDMA devices: {d:?}"),
        Err(e) => panic!("unexpected error: {e}"),
    }
    let e = RealProvider
        .open("mlx5_0")
        .err()
        .expect("no device to open");
    assert_eq!(e.to_string(), "no RDMA devices found");
}

fn request(device: &str, params: WriteBwParams, json: bool) -> WriteBwRequest {
    WriteBwRequest {
        device: device.into(),
        params,
        json,
        use_cuda: None,
    }
}

fn cli(req: &WriteBwRequest, prov: &impl VerbsProvider, clock: &SimClock) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let f = fixed(u64::MAX / 2, u64::MAX / 2, true);
    let code = rund_check::run::run_report(req, prov, clock, &f, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn cli_with_the_real_backend_says_no_devices_and_fails() {
    use rund_check::verbs::real::RealProvider;
    if RealProvider.device_names().is_ok() {
        rund_skip::skip!("this machine has RDMA devices");
    }
    let all_sizes = WriteBwParams {
        run_all: true,
        ..Default::default()
    };
    for req in [
        request("all", WriteBwParams::default(), false),
        request("mlx5_0", WriteBwParams::default(), false),
        request("all", all_sizes, true),
    ] {
        let (code, out, err) = cli(&req, &RealProvider, &SimClock::new());
        assert_ne!(code, 0, "{req:?}");
        assert!(
            err.contains("no RDMA devices found") || out.contains("no RDMA devices found"),
            "{req:?}: {out} {err}"
        );
    }
    // The entry point `rund check write-bw` calls.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let req = request("all", WriteBwParams::default(), false);
    assert_ne!(rund_check::run::run_real(&req, &mut out, &mut err), 0);
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("no RDMA devices found"), "{err}");
}

#[test]
fn cli_table_json_and_limit() {
    let clock = SimClock::new();
    let prov = SimProvider::new(&["sim0", "sim1"], clock.clone(), SimModel::default());
    let cli = |req: WriteBwRequest, prov: &SimProvider| cli(&req, prov, &clock);
    let n100 = WriteBwParams {
        iters: 100,
        ..Default::default()
    };
    let (code, out, _) = cli(request("all", n100.clone(), false), &prov);
    assert_eq!(code, 0);
    assert!(
        out.contains("BW peak[MiB/sec]") && out.contains(" sim0") && out.contains(" sim1"),
        "{out}"
    );
    assert!(out.contains(" 65536      100 "), "{out}");
    // ~11920 MiB/s on the simulated link: a 20000 MiB/s limit fails.
    let limited = WriteBwParams {
        limit_bw: Some(20000.0),
        ..n100.clone()
    };
    let (code, _, err) = cli(request("sim1", limited, false), &prov);
    assert_eq!(code, 1);
    assert!(err.contains("below bw limit"), "{err}");
    // With --report-gbits the limit is in Gb/s: the link gives ~99.6 Gb/s.
    let gbits = WriteBwParams {
        limit_bw: Some(90.0),
        report_gbits: true,
        ..n100
    };
    let (code, out, _) = cli(request("all", gbits, true), &prov);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["results"][0]["unit"], "Gb/s");
    let (code, _, err) = cli(request("nope", WriteBwParams::default(), false), &prov);
    assert_eq!(code, 1);
    assert!(err.contains("nope not found"), "{err}");
}
