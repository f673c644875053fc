//! The engine against the simulated verbs backend: window, signalling, accounting, errors,
//! duration mode, QP attributes and resource teardown.

use std::collections::BTreeMap;
use std::io;

use rund_check::engine::params::{SysInfo, WriteBwParams};
use rund_check::engine::run_write_bw;
use rund_check::verbs::sim::{SimModel, SimProvider};
use rund_check::verbs::*;
use rund_check::{CheckError, RlimitSource, SimClock};

/// Unlimited memlock, so these tests do not depend on the machine.
struct NoLimit;
impl RlimitSource for NoLimit {
    fn memlock(&self) -> io::Result<(Option<u64>, Option<u64>)> {
        Ok((None, None))
    }
    fn set_memlock_soft(&self, _: Option<u64>, _: Option<u64>) -> io::Result<()> {
        Ok(())
    }
    fn pinned_bytes(&self) -> u64 {
        0
    }
}

const SYS: SysInfo = SysInfo {
    page_size: 4096,
    cache_line: 64,
};

fn run(
    p: WriteBwParams,
    model: SimModel,
) -> (Result<Vec<rund_check::BwReport>, CheckError>, SimProvider) {
    let clock = SimClock::new();
    let prov = SimProvider::new(&["sim0"], clock.clone(), model);
    let r = p.resolve(SYS).unwrap();
    let res = {
        let mut dev = prov.open("sim0").unwrap();
        run_write_bw(&mut dev, &clock, &r, &NoLimit, MemKind::Host)
    };
    (res, prov)
}

#[test]
fn default_run_matches_the_link_model() {
    let (res, prov) = run(WriteBwParams::default(), SimModel::default());
    let reps = res.unwrap();
    assert_eq!(reps.len(), 1);
    let r = &reps[0];
    assert_eq!((r.bytes, r.iterations), (65536, 5000));
    // Model: 12.5e9 B/s -> ceil(65536 / 12.5) = 5243 ns per WR on the wire; the first post
    // ends at 50 ns; the link never idles; the last completion is 2000 ns after the wire.
    let dt = 50.0 + 5000.0 * 5243.0 + 2000.0;
    let avg = 65536.0 * 5000.0 * 1e9 / (dt * 1_048_576.0);
    assert!(
        (r.bw_average - avg).abs() < 1e-6,
        "{} vs {avg}",
        r.bw_average
    );
    assert!((r.msg_rate_mpps - 5000.0 * 1e9 / (dt * 1e6)).abs() < 1e-9);
    // Best interval: (tc[4999] - tp[0]) / 5000 = 5243 ns (integer).
    let peak = 65536.0 * 1e9 / (5243.0 * 1_048_576.0);
    assert!((r.bw_peak - peak).abs() < 1e-6, "{} vs {peak}", r.bw_peak);
    let s = prov.stats();
    assert_eq!(s.posts, 5000);
    assert_eq!(
        s.signaled.len(),
        5000,
        "cq_mod 1 for 64 KiB: every WR signaled"
    );
    assert_eq!(s.polled, 5000);
    assert!(s.max_outstanding <= 128);
    assert_eq!(s.max_outstanding, 128, "the window is used fully");
}

#[test]
fn window_and_cq_mod_crediting() {
    let p = WriteBwParams {
        size: 4096,
        iters: 1003,
        tx_depth: 16,
        cq_mod: Some(4),
        ..Default::default()
    };
    let (res, prov) = run(p, SimModel::default());
    let r = &res.unwrap()[0];
    assert_eq!(r.iterations, 1003);
    let s = prov.stats();
    assert_eq!(s.posts, 1003, "exactly iters posts");
    assert!(
        s.max_outstanding <= 16,
        "at most tx_depth outstanding: {}",
        s.max_outstanding
    );
    let expect: Vec<u64> = (0..1003).filter(|k| k % 4 == 3 || *k == 1002).collect();
    assert_eq!(
        s.signaled, expect,
        "every cq_mod-th WR and the last one are signaled"
    );
    // One completion per signaled WR, each credited cq_mod.
    assert_eq!(s.polled, expect.len() as u64);
    assert_eq!(s.qp_caps[0].max_send_wr, 16);
    assert_eq!(s.cq_depths, vec![16]);
}

#[test]
fn a_window_bigger_than_the_queue_would_be_refused() {
    // Sanity of the simulator itself: a QP with a smaller queue than the window fails posts,
    // so the window assertions above are meaningful.
    let clock = SimClock::new();
    let prov = SimProvider::new(&["sim0"], clock, SimModel::default());
    let mut dev = prov.open("sim0").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4).unwrap();
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let a = dev.create_rc_qp(pd, cq, caps).unwrap();
    let b = dev.create_rc_qp(pd, cq, caps).unwrap();
    dev.modify_qp_init(a.handle, &InitAttr::perftest_write(1))
        .unwrap();
    dev.modify_qp_rtr(a.handle, &RtrAttr::perftest(1, Mtu(5), b.qpn, 1, 1))
        .unwrap();
    dev.modify_qp_rts(a.handle, &RtsAttr::perftest(1)).unwrap();
    let wr = WriteWr {
        wr_id: 0,
        local_addr: 0,
        len: 8,
        lkey: 0,
        remote_addr: 0,
        rkey: 0,
        signaled: false,
    };
    dev.post_write(a.handle, &wr).unwrap();
    dev.post_write(a.handle, &wr).unwrap();
    assert!(dev.post_write(a.handle, &wr).is_err());
}

#[test]
fn error_status_fails_the_run_and_names_it() {
    let model = SimModel {
        fail_wr: BTreeMap::from([(37, WC_RETRY_EXC_ERR)]),
        ..Default::default()
    };
    let (res, _) = run(WriteBwParams::default(), model);
    match res {
        Err(CheckError::Completion {
            status,
            status_name,
            wr_id,
            ..
        }) => {
            assert_eq!(status, 12);
            assert_eq!(status_name, "IBV_WC_RETRY_EXC_ERR");
            assert_eq!(wr_id, 37);
        }
        other => panic!("expected a completion error, got {other:?}"),
    }
}

#[test]
fn error_on_an_unsignaled_wr_still_surfaces() {
    let model = SimModel {
        fail_wr: BTreeMap::from([(33, 10)]),
        ..Default::default()
    };
    let p = WriteBwParams {
        size: 1024,
        iters: 500,
        ..Default::default()
    }; // cq_mod 100
    let (res, _) = run(p, model);
    let e = res.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("IBV_WC_REM_ACCESS_ERR") && msg.contains("wr #33"),
        "{msg}"
    );
}

#[test]
fn duration_mode_counts_only_the_sample_window() {
    let p = WriteBwParams {
        duration: Some(4),
        ..Default::default()
    }; // margin 1 s
    let (res, prov) = run(p, SimModel::default());
    let r = &res.unwrap()[0];
    assert_eq!(r.bw_peak, 0.0, "duration mode does not measure peak");
    // The sample window is 2 s, entered and left on loop turns (at most one WR apart).
    let two_s = 2_000_000_000i64;
    assert!(
        (r.elapsed_ns as i64 - two_s).abs() < 20_000,
        "{}",
        r.elapsed_ns
    );
    // 2 s at one 64 KiB WR per 5243 ns.
    let expect = two_s as f64 / 5243.0;
    assert!(
        (r.iterations as f64 - expect).abs() <= 5.0,
        "{} vs {expect}",
        r.iterations
    );
    let s = prov.stats();
    assert!(
        s.posts > r.iterations,
        "warm-up and cool-down posts are not counted"
    );
    assert!(s.max_outstanding <= 128);
}

#[test]
fn run_all_reports_every_size() {
    let p = WriteBwParams {
        run_all: true,
        iters: 200,
        ..Default::default()
    };
    let (res, prov) = run(p, SimModel::default());
    let reps = res.unwrap();
    let sizes: Vec<u64> = reps.iter().map(|r| r.bytes).collect();
    assert_eq!(sizes, (1..24).map(|i| 1u64 << i).collect::<Vec<_>>());
    assert_eq!(
        prov.stats().mr_lens,
        vec![16 << 20],
        "one MR sized for 8 MiB x 2"
    );
}

#[test]
fn qp_attributes_are_perftests() {
    let (res, prov) = run(
        WriteBwParams {
            iters: 10,
            ..Default::default()
        },
        SimModel::default(),
    );
    res.unwrap();
    let s = prov.stats();
    assert_eq!(
        s.mr_access,
        vec![Access::LOCAL_WRITE.union(Access::REMOTE_WRITE)]
    );
    assert_eq!(s.init_attrs.len(), 2);
    for i in &s.init_attrs {
        assert_eq!(
            (i.pkey_index, i.port, i.access),
            (0, 1, Access::REMOTE_WRITE)
        );
    }
    assert_eq!(s.rtr_attrs.len(), 2);
    // Loopback: each QP points at the other.
    assert_eq!(s.rtr_attrs[0].dest_qpn, 0x41);
    assert_eq!(s.rtr_attrs[1].dest_qpn, 0x40);
    for r in &s.rtr_attrs {
        assert_eq!(
            (r.path_mtu, r.max_dest_rd_atomic, r.min_rnr_timer),
            (Mtu(5), 1, 12)
        );
        assert!(r.grh.is_none(), "no GRH on InfiniBand");
    }
    for r in &s.rts_attrs {
        assert_eq!(
            (r.timeout, r.retry_cnt, r.rnr_retry, r.max_rd_atomic),
            (14, 7, 7, 1)
        );
    }
    // PSNs agree: each RTR's rq_psn is the other QP's sq_psn.
    assert_eq!(s.rtr_attrs[0].rq_psn, s.rts_attrs[1].sq_psn);
    assert_eq!(s.rtr_attrs[1].rq_psn, s.rts_attrs[0].sq_psn);
    assert_eq!(s.destroyed, vec!["qp", "qp", "cq", "mr", "pd", "device"]);
}

#[test]
fn roce_uses_gid_routing() {
    let mut model = SimModel::default();
    model.port.link_layer = LinkLayer::Ethernet;
    let (res, prov) = run(
        WriteBwParams {
            iters: 10,
            gid_index: Some(3),
            ..Default::default()
        },
        model,
    );
    res.unwrap();
    let g = prov.stats().rtr_attrs[0].grh.expect("GRH on RoCE");
    assert_eq!((g.sgid_index, g.hop_limit), (3, 0xff));
}

#[test]
fn port_not_active_is_a_clear_error() {
    let mut model = SimModel::default();
    model.port.state = PortState::Down;
    let (res, prov) = run(WriteBwParams::default(), model);
    let msg = res.unwrap_err().to_string();
    assert!(msg.contains("port 1 of sim0 is DOWN"), "{msg}");
    assert!(prov.stats().mr_lens.is_empty(), "nothing registered");
}

#[test]
fn roce_gid_is_picked_as_perftest_does_unless_given() {
    let fe80 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 1];
    let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1];
    let mut model = SimModel::default();
    model.port.link_layer = LinkLayer::Ethernet;
    // soft-RoCE's table: each address as RoCE v1 then v2, then empty entries.
    model.gids = vec![
        (fe80, GidType::IbRoceV1),
        (fe80, GidType::RoceV2),
        (v4, GidType::IbRoceV1),
        (v4, GidType::RoceV2),
    ];
    model.port.gid_tbl_len = 8;
    let params = WriteBwParams {
        iters: 10,
        ..Default::default()
    };
    let (res, prov) = run(params.clone(), model.clone());
    assert_eq!(
        res.unwrap()[0].gid_index,
        Some(3),
        "the IPv4-mapped RoCE v2 GID"
    );
    let g = prov.stats().rtr_attrs[0].grh.unwrap();
    assert_eq!((g.sgid_index, g.dgid), (3, v4));

    let (res, prov) = run(
        WriteBwParams {
            gid_index: Some(1),
            ..params.clone()
        },
        model,
    );
    assert_eq!(res.unwrap()[0].gid_index, Some(1), "-x wins");
    assert_eq!(prov.stats().rtr_attrs[0].grh.unwrap().sgid_index, 1);

    // InfiniBand: no GRH, no GID index.
    let (res, prov) = run(params, SimModel::default());
    assert_eq!(res.unwrap()[0].gid_index, None);
    assert!(prov.stats().rtr_attrs[0].grh.is_none());
}
