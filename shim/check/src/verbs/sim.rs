//! A simulated verbs device. It enforces the QP state machine and the send-queue capacity,
//! produces completions from a simple link model (serialisation at `bandwidth`, plus `latency`),
//! injects error statuses on chosen WRs and records what the engine did, so tests can check
//! the window and signalling logic without hardware. Time only moves through its [`SimClock`]:
//! posting costs `post_cost_ns`, and polling an empty CQ jumps to the next completion.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::{Clock, SimClock};

/// The link model and injected faults.
#[derive(Debug, Clone)]
pub struct SimModel {
    /// Bytes per second on the wire.
    pub bandwidth_bps: f64,
    /// Fixed latency from end of serialisation to the completion.
    pub latency_ns: u64,
    /// CPU cost of one post.
    pub post_cost_ns: u64,
    /// WR sequence number (0-based, in post order on its QP) -> completion status.
    pub fail_wr: BTreeMap<u64, u32>,
    pub port: PortInfo,
    /// Fail `reg_mr` with this errno (e.g. ENOMEM, as a memlock shortfall does).
    pub reg_mr_errno: Option<i32>,
    /// A RoCE GID table; empty: every index reads as `fe80::<index>` of no known type.
    pub gids: Vec<([u8; 16], GidType)>,
}

impl Default for SimModel {
    fn default() -> Self {
        Self {
            bandwidth_bps: 12.5e9,
            latency_ns: 2_000,
            post_cost_ns: 50,
            fail_wr: BTreeMap::new(),
            port: PortInfo {
                state: PortState::Active,
                active_mtu: Mtu(5),
                link_layer: LinkLayer::InfiniBand,
                lid: 7,
                gid_tbl_len: 1,
            },
            reg_mr_errno: None,
            gids: Vec::new(),
        }
    }
}

/// What the engine did, for assertions.
#[derive(Debug, Default, Clone)]
pub struct SimStats {
    pub opens: u64,
    pub posts: u64,
    /// Sequence numbers of the WRs posted with IBV_SEND_SIGNALED.
    pub signaled: Vec<u64>,
    /// Largest number of WRs in the send queue (posted, not retired by a polled completion).
    pub max_outstanding: u64,
    pub polled: u64,
    pub mr_lens: Vec<u64>,
    pub mr_access: Vec<Access>,
    pub qp_caps: Vec<QpCaps>,
    pub init_attrs: Vec<InitAttr>,
    pub rtr_attrs: Vec<RtrAttr>,
    pub rts_attrs: Vec<RtsAttr>,
    pub cq_depths: Vec<u32>,
    /// Resource destruction order, e.g. ["qp", "qp", "cq", "mr", "pd", "device"].
    pub destroyed: Vec<&'static str>,
}

/// Opens [`SimDevice`]s sharing one clock, model and stats.
#[derive(Clone)]
pub struct SimProvider {
    pub names: Vec<String>,
    pub clock: SimClock,
    pub model: SimModel,
    pub stats: Arc<Mutex<SimStats>>,
}

impl SimProvider {
    pub fn new(names: &[&str], clock: SimClock, model: SimModel) -> Self {
        Self {
            names: names.iter().map(|s| s.to_string()).collect(),
            clock,
            model,
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> SimStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl VerbsProvider for SimProvider {
    type Device = SimDevice;

    fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        if self.names.is_empty() {
            return Err(VerbsError::NoDevices);
        }
        Ok(self.names.clone())
    }

    fn open(&self, name: &str) -> Result<SimDevice, VerbsError> {
        let names = self.device_names()?;
        if !names.iter().any(|n| n == name) {
            return Err(VerbsError::DeviceNotFound {
                name: name.to_string(),
                available: names.join(", "),
            });
        }
        if let Ok(mut s) = self.stats.lock() {
            s.opens += 1;
        }
        Ok(SimDevice {
            name: name.to_string(),
            clock: self.clock.clone(),
            model: self.model.clone(),
            stats: self.stats.clone(),
            pds: 0,
            mrs: Vec::new(),
            cqs: Vec::new(),
            qps: Vec::new(),
            link_free_at: 0,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Error,
}

struct SimQp {
    qpn: u32,
    cq: CqHandle,
    caps: QpCaps,
    state: QpState,
    posted: u64,
    retired: u64,
}

struct SimCq {
    depth: u32,
    /// (completion time, qp index, seq, completion)
    pending: VecDeque<(u64, usize, u64, Completion)>,
}

pub struct SimDevice {
    name: String,
    clock: SimClock,
    model: SimModel,
    stats: Arc<Mutex<SimStats>>,
    pds: u32,
    mrs: Vec<MrInfo>,
    cqs: Vec<SimCq>,
    qps: Vec<SimQp>,
    link_free_at: u64,
}

impl SimDevice {
    fn with_stats(&self, f: impl FnOnce(&mut SimStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    fn qp(&mut self, h: QpHandle) -> Result<&mut SimQp, VerbsError> {
        let name = self.name.clone();
        self.qps.get_mut(h.0 as usize).ok_or(VerbsError::BadHandle {
            device: name,
            kind: "qp",
            id: h.0,
        })
    }

    fn transition(&mut self, h: QpHandle, from: QpState, to: QpState) -> Result<(), VerbsError> {
        let name = self.name.clone();
        let qp = self.qp(h)?;
        if qp.state != from {
            return Err(VerbsError::call(
                &name,
                "ibv_modify_qp",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        qp.state = to;
        Ok(())
    }
}

impl Verbs for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_port(&mut self, port: u8) -> Result<PortInfo, VerbsError> {
        if port != 1 {
            return Err(VerbsError::call(
                &self.name,
                "ibv_query_port",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        Ok(self.model.port)
    }

    fn query_gid(&mut self, _port: u8, index: u32) -> Result<[u8; 16], VerbsError> {
        if let Some((gid, _)) = self.model.gids.get(index as usize) {
            return Ok(*gid);
        }
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[15] = index as u8;
        Ok(gid)
    }

    fn query_gid_type(&mut self, _port: u8, index: u32) -> Result<Option<GidType>, VerbsError> {
        Ok(self.model.gids.get(index as usize).map(|g| g.1))
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, VerbsError> {
        self.pds += 1;
        Ok(PdHandle(self.pds - 1))
    }

    fn reg_mr(
        &mut self,
        _pd: PdHandle,
        len: usize,
        access: Access,
        _mem: MemKind,
    ) -> Result<MrInfo, VerbsError> {
        if let Some(errno) = self.model.reg_mr_errno {
            return Err(VerbsError::call(
                &self.name,
                "ibv_reg_mr",
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        let idx = self.mrs.len() as u64;
        let mr = MrInfo {
            addr: 0x1000_0000 * (idx + 1),
            len: len as u64,
            lkey: 0x100 + idx as u32,
            rkey: 0x200 + idx as u32,
        };
        self.mrs.push(mr);
        self.with_stats(|s| {
            s.mr_lens.push(len as u64);
            s.mr_access.push(access);
        });
        Ok(mr)
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqHandle, VerbsError> {
        self.cqs.push(SimCq {
            depth,
            pending: VecDeque::new(),
        });
        self.with_stats(|s| s.cq_depths.push(depth));
        Ok(CqHandle(self.cqs.len() as u32 - 1))
    }

    fn create_rc_qp(
        &mut self,
        _pd: PdHandle,
        cq: CqHandle,
        caps: QpCaps,
    ) -> Result<QpInfo, VerbsError> {
        let qpn = 0x40 + self.qps.len() as u32;
        self.qps.push(SimQp {
            qpn,
            cq,
            caps,
            state: QpState::Reset,
            posted: 0,
            retired: 0,
        });
        self.with_stats(|s| s.qp_caps.push(caps));
        Ok(QpInfo {
            handle: QpHandle(self.qps.len() as u32 - 1),
            qpn,
        })
    }

    fn modify_qp_init(&mut self, qp: QpHandle, attr: &InitAttr) -> Result<(), VerbsError> {
        self.transition(qp, QpState::Reset, QpState::Init)?;
        self.with_stats(|s| s.init_attrs.push(*attr));
        Ok(())
    }

    fn modify_qp_rtr(&mut self, qp: QpHandle, attr: &RtrAttr) -> Result<(), VerbsError> {
        if !self.qps.iter().any(|q| q.qpn == attr.dest_qpn) {
            return Err(VerbsError::call(
                &self.name,
                "ibv_modify_qp(RTR)",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        self.transition(qp, QpState::Init, QpState::Rtr)?;
        self.with_stats(|s| s.rtr_attrs.push(*attr));
        Ok(())
    }

    fn modify_qp_rts(&mut self, qp: QpHandle, attr: &RtsAttr) -> Result<(), VerbsError> {
        self.transition(qp, QpState::Rtr, QpState::Rts)?;
        self.with_stats(|s| s.rts_attrs.push(*attr));
        Ok(())
    }

    fn post_write(&mut self, h: QpHandle, wr: &WriteWr) -> Result<(), VerbsError> {
        let name = self.name.clone();
        let qpi = h.0 as usize;
        let (state, outstanding, cap, cq, seq) = {
            let qp = self.qp(h)?;
            (
                qp.state,
                qp.posted - qp.retired,
                qp.caps.max_send_wr,
                qp.cq,
                qp.posted,
            )
        };
        if state != QpState::Rts && state != QpState::Error {
            return Err(VerbsError::call(
                &name,
                "ibv_post_send",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        // A full send queue is what real HW reports as ENOMEM: the engine's window must
        // never let this happen.
        if outstanding >= u64::from(cap) {
            return Err(VerbsError::call(
                &name,
                "ibv_post_send",
                std::io::Error::from_raw_os_error(libc::ENOMEM),
            ));
        }
        self.clock.advance(self.model.post_cost_ns);
        let now = self.clock.now_ns();
        let wire_ns = (f64::from(wr.len) * 1e9 / self.model.bandwidth_bps).ceil() as u64;
        let start = now.max(self.link_free_at);
        self.link_free_at = start + wire_ns;
        let done = self.link_free_at + self.model.latency_ns;
        let status = if state == QpState::Error {
            WC_WR_FLUSH_ERR
        } else {
            self.model.fail_wr.get(&seq).copied().unwrap_or(WC_SUCCESS)
        };
        if status != WC_SUCCESS {
            if let Some(q) = self.qps.get_mut(qpi) {
                q.state = QpState::Error;
            }
        }
        // Errors always complete; successful WRs only when signaled.
        if wr.signaled || status != WC_SUCCESS {
            let cqe = Completion {
                wr_id: wr.wr_id,
                status,
                vendor_err: if status == WC_SUCCESS { 0 } else { 0x81 },
            };
            if let Some(c) = self.cqs.get_mut(cq.0 as usize) {
                c.pending.push_back((done, qpi, seq, cqe));
            }
        }
        let qp = self.qp(h)?;
        qp.posted += 1;
        let out = qp.posted - qp.retired;
        self.with_stats(|s| {
            s.posts += 1;
            if wr.signaled {
                s.signaled.push(seq);
            }
            s.max_outstanding = s.max_outstanding.max(out);
        });
        Ok(())
    }

    fn poll_cq(&mut self, h: CqHandle, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let name = self.name.clone();
        let cq = self
            .cqs
            .get_mut(h.0 as usize)
            .ok_or(VerbsError::BadHandle {
                device: name,
                kind: "cq",
                id: h.0,
            })?;
        if cq.pending.len() > cq.depth as usize {
            return Err(VerbsError::call(
                &self.name,
                "ibv_poll_cq (CQ overrun)",
                std::io::Error::from_raw_os_error(libc::EOVERFLOW),
            ));
        }
        // Busy polling an empty CQ: jump to the next completion.
        if let Some(&(t, ..)) = cq.pending.front() {
            self.clock.advance_to(t);
        }
        let now = self.clock.now_ns();
        let mut n = 0;
        let mut retire = Vec::new();
        while n < out.len() {
            match cq.pending.front() {
                Some(&(t, qpi, seq, c)) if t <= now => {
                    out[n] = c;
                    n += 1;
                    retire.push((qpi, seq));
                    cq.pending.pop_front();
                }
                _ => break,
            }
        }
        // RC completes in order: a polled completion retires every earlier WR of its QP.
        for (qpi, seq) in retire {
            if let Some(q) = self.qps.get_mut(qpi) {
                q.retired = q.retired.max(seq + 1).min(q.posted);
            }
        }
        self.with_stats(|s| s.polled += n as u64);
        Ok(n)
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        let (q, c, m, p) = (self.qps.len(), self.cqs.len(), self.mrs.len(), self.pds);
        self.with_stats(|s| {
            s.destroyed.extend(std::iter::repeat_n("qp", q));
            s.destroyed.extend(std::iter::repeat_n("cq", c));
            s.destroyed.extend(std::iter::repeat_n("mr", m));
            s.destroyed.extend(std::iter::repeat_n("pd", p as usize));
            s.destroyed.push("device");
        });
    }
}
