//! perftest's arithmetic and parameter rules against hand-computed values.

use rund_check::engine::duration::{DurationFsm, DurationState};
use rund_check::engine::params::*;
use rund_check::engine::report::*;

const SYS: SysInfo = SysInfo {
    page_size: 4096,
    cache_line: 64,
};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn defaults_are_perftests() {
    let r = WriteBwParams::default().resolve(SYS).unwrap();
    assert_eq!(r.sizes, vec![65536]);
    assert_eq!(r.iters, 5000);
    assert_eq!(r.tx_depth, 128);
    // size 65536 > 8192 without -a: cq_mod 100 becomes 1.
    assert_eq!(r.cq_mod, 1);
    // INC(max(65536, 4096), 64) x 2 x 1 = 128 KiB.
    assert_eq!(r.buffer_bytes, 131072);
    assert_eq!(r.test, TestType::Iterations);
    assert!(!r.no_peak);
}

#[test]
fn cq_mod_rules() {
    let small = WriteBwParams {
        size: 8192,
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!(small.cq_mod, 100, "8192 is not above the limit");
    let big = WriteBwParams {
        size: 8193,
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!(big.cq_mod, 1);
    let all = WriteBwParams {
        run_all: true,
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!(all.cq_mod, 100, "-a keeps cq_mod");
    assert_eq!(all.sizes.first(), Some(&2));
    assert_eq!(all.sizes.last(), Some(&8_388_608));
    assert_eq!(all.sizes.len(), 23);
    // -a sizes the buffer for 8 MiB: 16 MiB.
    assert_eq!(all.buffer_bytes, 16 << 20);
    let req = WriteBwParams {
        cq_mod: Some(50),
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!(req.cq_mod, 50, "an explicit cq_mod is kept for large sizes");
    // tx_depth is capped at iters, and cq_mod at tx_depth.
    let few = WriteBwParams {
        size: 64,
        iters: 20,
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!((few.tx_depth, few.cq_mod), (20, 20));
}

#[test]
fn buffer_formula_rounds_to_cache_line_and_page() {
    let sys = SysInfo {
        page_size: 4096,
        cache_line: 128,
    };
    assert_eq!(buffer_bytes(100, sys, 1), 8192, "max(size, page) first");
    assert_eq!(buffer_bytes(5000, sys, 1), 2 * 5120);
    assert_eq!(buffer_bytes(5000, sys, 3), 6 * 5120);
    assert_eq!(inc(65, 64), 128);
}

#[test]
fn cache_line_detection_order() {
    assert_eq!(cache_line_from(128, Some("64\n")), 128, "sysconf first");
    assert_eq!(cache_line_from(0, Some("256\n")), 256, "then sysfs");
    assert_eq!(cache_line_from(0, None), 64, "then 64");
    assert_eq!(cache_line_from(0, Some("junk")), 64);
    assert_eq!(
        cache_line_from(-1, Some("32")),
        64,
        "negative sysconf is not positive"
    );
}

#[test]
fn invalid_params_are_rejected() {
    for p in [
        WriteBwParams {
            size: 0,
            ..Default::default()
        },
        WriteBwParams {
            size: 8_388_609,
            ..Default::default()
        },
        WriteBwParams {
            iters: 4,
            ..Default::default()
        },
        WriteBwParams {
            tx_depth: 0,
            ..Default::default()
        },
        WriteBwParams {
            duration: Some(0),
            ..Default::default()
        },
        WriteBwParams {
            duration: Some(5),
            run_all: true,
            ..Default::default()
        },
        WriteBwParams {
            limit_bw: Some(f64::NAN),
            ..Default::default()
        },
    ] {
        assert!(p.resolve(SYS).is_err(), "{p:?} must be rejected");
    }
}

#[test]
fn duration_mode_params() {
    let r = WriteBwParams {
        duration: Some(8),
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    assert_eq!(r.test, TestType::Duration { secs: 8, margin: 2 });
    assert_eq!(r.iters, 0);
    assert!(r.no_peak);
}

#[test]
fn signalling_rule() {
    let r = WriteBwParams {
        size: 64,
        iters: 10,
        cq_mod: Some(4),
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    let sig: Vec<u64> = (0..10).filter(|&k| r.is_signaled(k)).collect();
    assert_eq!(sig, vec![3, 7, 9], "every 4th, and the last");
}

#[test]
fn message_offsets_cycle_through_the_page() {
    let r = WriteBwParams {
        size: 1000,
        ..Default::default()
    }
    .resolve(SYS)
    .unwrap();
    // INC(1000, 64) = 1024: four slots in a 4096-byte cycle buffer.
    let offs: Vec<u64> = (0..6).map(|k| r.msg_offset(1000, k)).collect();
    assert_eq!(offs, vec![0, 1024, 2048, 3072, 0, 1024]);
    assert_eq!(r.msg_offset(4096, 3), 0, "large messages do not move");
}

fn ts(tp: &[u64], tc: &[u64]) -> Timestamps {
    Timestamps {
        tposted: tp.to_vec(),
        tcompleted: tc.to_vec(),
    }
}

#[test]
fn report_formulas_by_hand() {
    // 4 WRs of 64 KiB, every one signaled.
    let t = ts(
        &[0, 10_000, 20_000, 30_000],
        &[100_000, 105_000, 110_000, 200_000],
    );
    let r = compute(65536, 4, 1, &t, false, ReportUnit::MiB);
    // 0.25 MiB in 200 us = 1250 MiB/s; 4 msgs / 200 us = 0.02 Mpps.
    assert!(close(r.bw_average, 1250.0), "{}", r.bw_average);
    assert!(close(r.msg_rate_mpps, 0.02), "{}", r.msg_rate_mpps);
    // Best interval: (tc[2] - tp[0]) / 3 = 110000 / 3 = 36666 ns (integer, as perftest).
    assert_eq!(peak_delta(&t, 4, 1), 36666);
    assert!(close(r.bw_peak, 65536.0 * 1e9 / (36666.0 * 1_048_576.0)));
    // Gb/s: 262144 B * 8 / 200 us = 10.48576 Gb/s.
    let g = compute(65536, 4, 1, &t, false, ReportUnit::Gbits);
    assert!(close(g.bw_average, 10.48576), "{}", g.bw_average);
}

#[test]
fn peak_with_cq_moderation_uses_only_completion_indices() {
    // 6 WRs, cq_mod 3: completions land on indices 2 and 5 only.
    let t = ts(&[0, 10, 20, 30, 40, 50], &[0, 0, 300, 0, 0, 420]);
    // Candidates: i=0: 300/3=100, 420/6=70; i=1: 290/2=145, 410/5=82; i=2: 280, 400/4=100;
    // i=3: 390/3=130; i=4: 380/2=190; i=5: 370. Best 70.
    assert_eq!(peak_delta(&t, 6, 3), 70);
    // 7 WRs, cq_mod 3: the last (index 6) is signaled too and is a candidate.
    let t = ts(&[0, 10, 20, 30, 40, 50, 60], &[0, 0, 300, 0, 0, 600, 490]);
    assert_eq!(
        peak_delta(&t, 7, 3),
        70,
        "490/7 = 70 via the explicit last WR"
    );
}

#[test]
fn no_peak_reports_zero_peak_and_uses_index_zero() {
    let t = ts(&[1_000], &[1_000_001_000]);
    let r = compute(4096, 1000, 1, &t, true, ReportUnit::MiB);
    assert_eq!(r.bw_peak, 0.0);
    assert!(close(r.bw_average, 4096.0 * 1000.0 / 1_048_576.0));
    assert!(close(r.msg_rate_mpps, 0.001));
}

#[test]
fn report_line_matches_perftest_format() {
    let r = BwReport {
        bytes: 65536,
        iterations: 5000,
        bw_peak: 11920.5,
        bw_average: 11900.25,
        msg_rate_mpps: 0.190404,
        unit: ReportUnit::MiB,
        elapsed_ns: 1,
        gid_index: None,
    };
    assert_eq!(
        format_line(&r),
        " 65536      5000             11920.50            11900.25\t\t   0.190404"
    );
    assert!(
        header(ReportUnit::MiB).contains("BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]")
    );
    assert!(header(ReportUnit::Gbits).contains("BW average[Gb/sec]"));
}

#[test]
fn duration_fsm_follows_perftest_states() {
    const S: u64 = 1_000_000_000;
    let mut f = DurationFsm::new(100, 8, 2);
    assert_eq!(
        f.tick(100 + 2 * S - 1),
        DurationState::Start,
        "warm-up lasts margin"
    );
    assert_eq!(f.tick(100 + 2 * S), DurationState::Sample);
    assert_eq!(f.t_start, 100 + 2 * S);
    assert_eq!(
        f.tick(100 + 6 * S - 1),
        DurationState::Sample,
        "sample lasts D - 2*margin"
    );
    assert_eq!(f.tick(100 + 6 * S + 5), DurationState::StopSample);
    assert_eq!(f.t_end, 100 + 6 * S + 5);
    assert_eq!(f.tick(100 + 8 * S), DurationState::StopSample);
    assert_eq!(f.tick(100 + 8 * S + 5), DurationState::End);
    // margin 0: straight to SAMPLE, and a zero margin still reaches END.
    let mut z = DurationFsm::new(0, 1, 0);
    assert_eq!(z.state, DurationState::Sample);
    assert_eq!(z.tick(S), DurationState::End);
}
