//! The write_bw engine: loopback RC set-up and perftest's `run_iter_bw`, generic over the
//! verbs backend and the clock.

pub mod duration;
pub mod gid;
pub mod params;
pub mod report;

use crate::clock::Clock;
use crate::error::CheckError;
use crate::memlock::{self, RlimitSource};
use crate::verbs::*;
use duration::{DurationFsm, DurationState};
use params::{Resolved, TestType};
use report::{BwReport, Timestamps};

/// perftest's `CTX_POLL_BATCH`.
pub const CTX_POLL_BATCH: usize = 16;
/// perftest's `DEF_RX_RDMA`.
const DEF_RX_RDMA: u32 = 1;

/// Two RC QPs on one port, connected to each other, sharing one PD, MR and CQ. The first half
/// of the MR is the source, the second half the target.
pub struct Loopback {
    pub port: PortInfo,
    pub cq: CqHandle,
    pub sender: QpInfo,
    pub receiver: QpInfo,
    pub mr: MrInfo,
    /// The GID index used on RoCE (given with `-x` or picked as perftest does).
    pub gid_index: Option<u32>,
}

/// A 24-bit PSN, as perftest's `lrand48() & 0xffffff`.
fn psn(seed: u64) -> u32 {
    let x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((x >> 33) as u32) & 0x00ff_ffff
}

/// Queries the port, checks memlock, then builds the loopback pair through INIT/RTR/RTS.
pub fn setup<V: Verbs + ?Sized>(
    dev: &mut V,
    r: &Resolved,
    rlimit: &dyn RlimitSource,
    mem: MemKind,
) -> Result<Loopback, CheckError> {
    let port = dev.query_port(r.ib_port)?;
    if port.state != PortState::Active {
        return Err(CheckError::PortNotActive {
            device: dev.name().to_string(),
            port: r.ib_port,
            state: port.state.to_string(),
        });
    }
    let gid_index = match (port.link_layer, r.gid_index) {
        (LinkLayer::Ethernet, None) => Some(gid::best_gid_index(dev, r.ib_port, port.gid_tbl_len)?),
        (LinkLayer::Ethernet, Some(i)) => Some(i),
        _ => None,
    };
    let grh = if let Some(index) = gid_index {
        let gid = dev.query_gid(r.ib_port, index)?;
        Some(Grh {
            dgid: gid,
            sgid_index: index as u8,
            hop_limit: 0xff,
            traffic_class: 0,
            flow_label: 0,
        })
    } else {
        None
    };
    // Before pinning anything: a shortfall is one clear error, not "Couldn't allocate MR".
    if matches!(mem, MemKind::Host) {
        memlock::preflight(r.buffer_bytes, rlimit)?;
    }
    let pd = dev.alloc_pd()?;
    let mr = dev.reg_mr(
        pd,
        r.buffer_bytes as usize,
        Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        mem,
    )?;
    let cq = dev.create_cq(r.tx_depth)?;
    let caps = QpCaps {
        max_send_wr: r.tx_depth,
        max_recv_wr: DEF_RX_RDMA,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let sender = dev.create_rc_qp(pd, cq, caps)?;
    let receiver = dev.create_rc_qp(pd, cq, caps)?;
    let seed = std::process::id() as u64 ^ u64::from(sender.qpn) << 20;
    let (psn_s, psn_r) = (psn(seed), psn(seed.wrapping_add(1)));
    let init = InitAttr::perftest_write(r.ib_port);
    dev.modify_qp_init(sender.handle, &init)?;
    dev.modify_qp_init(receiver.handle, &init)?;
    let rtr = |dest: &QpInfo, dest_psn: u32| RtrAttr {
        grh,
        ..RtrAttr::perftest(r.ib_port, port.active_mtu, dest.qpn, dest_psn, port.lid)
    };
    dev.modify_qp_rtr(sender.handle, &rtr(&receiver, psn_r))?;
    dev.modify_qp_rtr(receiver.handle, &rtr(&sender, psn_s))?;
    dev.modify_qp_rts(sender.handle, &RtsAttr::perftest(psn_s))?;
    dev.modify_qp_rts(receiver.handle, &RtsAttr::perftest(psn_r))?;
    Ok(Loopback {
        port,
        cq,
        sender,
        receiver,
        mr,
        gid_index,
    })
}

/// perftest's `run_iter_bw` for one QP and post_list 1: keep at most tx_depth WRs
/// outstanding, signal every cq_mod-th, credit cq_mod per completion, fail on any
/// non-success status.
pub fn run_iter<V: Verbs + ?Sized, C: Clock + ?Sized>(
    dev: &mut V,
    clock: &C,
    lb: &Loopback,
    r: &Resolved,
    size: u64,
) -> Result<BwReport, CheckError> {
    let tot_iters = r.iters;
    let cq_mod = u64::from(r.cq_mod);
    let tx_depth = u64::from(r.tx_depth);
    let half = lb.mr.len / 2;
    let mut ts = Timestamps::default();
    if r.no_peak {
        ts.tposted = vec![0];
        ts.tcompleted = vec![0];
    } else {
        ts.tposted = vec![0; tot_iters as usize];
        ts.tcompleted = vec![0; tot_iters as usize];
    }
    let mut fsm = match r.test {
        TestType::Duration { secs, margin } => Some(DurationFsm::new(clock.now_ns(), secs, margin)),
        TestType::Iterations => None,
    };
    let duration = fsm.is_some();
    if !duration && r.no_peak {
        ts.tposted[0] = clock.now_ns();
    }
    let mut measured: u64 = 0;
    let (mut scnt, mut ccnt) = (0u64, 0u64);
    let mut wc = [Completion::default(); CTX_POLL_BATCH];
    let running =
        |fsm: &Option<DurationFsm>| fsm.as_ref().is_some_and(|f| f.state != DurationState::End);

    while scnt < tot_iters || ccnt < tot_iters || running(&fsm) {
        while (scnt < tot_iters || duration) && scnt < tx_depth + ccnt {
            if let Some(f) = fsm.as_mut() {
                if f.tick(clock.now_ns()) == DurationState::End {
                    break;
                }
            }
            let now = clock.now_ns();
            if !r.no_peak {
                ts.tposted[scnt as usize] = now;
            }
            let off = r.msg_offset(size, scnt);
            let wr = WriteWr {
                wr_id: scnt,
                local_addr: lb.mr.addr + off,
                len: size as u32,
                lkey: lb.mr.lkey,
                remote_addr: lb.mr.addr + half + off,
                rkey: lb.mr.rkey,
                signaled: r.is_signaled(scnt),
            };
            dev.post_write(lb.sender.handle, &wr)?;
            scnt += 1;
        }
        if ccnt < tot_iters || (duration && ccnt < scnt) {
            let ne = dev.poll_cq(lb.cq, &mut wc)?;
            for c in &wc[..ne] {
                if c.status != WC_SUCCESS {
                    return Err(CheckError::Completion {
                        device: dev.name().to_string(),
                        status: c.status,
                        status_name: wc_status_name(c.status),
                        vendor_err: c.vendor_err,
                        wr_id: c.wr_id,
                        size,
                        posted: scnt,
                        completed: ccnt,
                    });
                }
                ccnt += cq_mod;
                let now = clock.now_ns();
                if !r.no_peak {
                    let idx = ccnt.min(tot_iters) - 1;
                    ts.tcompleted[idx as usize] = now;
                }
                if let Some(f) = fsm.as_mut() {
                    if f.tick(now) == DurationState::Sample {
                        measured += cq_mod;
                    }
                }
            }
        }
        if let Some(f) = fsm.as_mut() {
            f.tick(clock.now_ns());
        }
    }
    let iters = match &fsm {
        Some(f) => {
            ts.tposted[0] = f.t_start;
            ts.tcompleted[0] = f.t_end;
            measured
        }
        None => {
            if r.no_peak {
                ts.tcompleted[0] = clock.now_ns();
            }
            tot_iters
        }
    };
    Ok(report::compute(
        size, iters, r.cq_mod, &ts, r.no_peak, r.unit,
    ))
}

/// Opens nothing: runs write_bw on an already opened device, one report per size.
pub fn run_write_bw<V: Verbs + ?Sized, C: Clock + ?Sized>(
    dev: &mut V,
    clock: &C,
    r: &Resolved,
    rlimit: &dyn RlimitSource,
    mem: MemKind,
) -> Result<Vec<BwReport>, CheckError> {
    let lb = setup(dev, r, rlimit, mem)?;
    r.sizes
        .iter()
        .map(|&size| {
            run_iter(dev, clock, &lb, r, size).map(|rep| BwReport {
                gid_index: lb.gid_index,
                ..rep
            })
        })
        .collect()
}

/// perftest's limit check (`is_bw_limit_passed |=`): passes when any reported size reaches
/// the limit.
pub fn limit_passed(reports: &[BwReport], limit: Option<f64>) -> bool {
    match limit {
        None => true,
        Some(l) => reports.iter().any(|r| r.bw_average >= l),
    }
}
