//! One opened libibverbs device. Every resource is tracked and released in `Drop`: QPs, CQs,
//! MRs (then their memory), PDs, then the context.

use std::alloc::Layout;
use std::io;
use std::ptr;

use rdma_sys::*;

use super::libverbs::{verbs, Verbs as LibVerbs};
use crate::verbs::*;

/// Memory behind an MR.
enum Backing {
    Host {
        ptr: *mut u8,
        layout: Layout,
    },
    #[cfg(feature = "cuda")]
    Cuda(super::cuda::CudaBuffer),
}

struct Mr {
    mr: *mut ibv_mr,
    backing: Backing,
}

pub struct RealDevice {
    lib: &'static LibVerbs,
    name: String,
    ctx: *mut ibv_context,
    pds: Vec<*mut ibv_pd>,
    mrs: Vec<Mr>,
    cqs: Vec<*mut ibv_cq>,
    qps: Vec<*mut ibv_qp>,
}

// SAFETY: libibverbs objects may be used from any thread; the device is only ever used
// through `&mut self`, so there is no concurrent access.
unsafe impl Send for RealDevice {}

fn errno() -> io::Error {
    io::Error::last_os_error()
}

impl RealDevice {
    pub(super) fn open(name: &str, dev: *mut ibv_device) -> Result<Self, VerbsError> {
        let lib = verbs()?;
        // SAFETY: dev is a live entry of a device list that outlives this call.
        let ctx = unsafe { (lib.ibv_open_device)(dev) };
        if ctx.is_null() {
            return Err(VerbsError::call(name, "ibv_open_device", errno()));
        }
        Ok(Self {
            lib,
            name: name.to_string(),
            ctx,
            pds: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            qps: Vec::new(),
        })
    }

    fn pd(&self, h: PdHandle) -> Result<*mut ibv_pd, VerbsError> {
        self.pds
            .get(h.0 as usize)
            .copied()
            .ok_or(self.bad("pd", h.0))
    }
    fn cq(&self, h: CqHandle) -> Result<*mut ibv_cq, VerbsError> {
        self.cqs
            .get(h.0 as usize)
            .copied()
            .ok_or(self.bad("cq", h.0))
    }
    fn qp(&self, h: QpHandle) -> Result<*mut ibv_qp, VerbsError> {
        self.qps
            .get(h.0 as usize)
            .copied()
            .ok_or(self.bad("qp", h.0))
    }
    fn bad(&self, kind: &'static str, id: u32) -> VerbsError {
        VerbsError::BadHandle {
            device: self.name.clone(),
            kind,
            id,
        }
    }

    fn modify(
        &self,
        qp: QpHandle,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        op: &'static str,
    ) -> Result<(), VerbsError> {
        let qp = self.qp(qp)?;
        // SAFETY: qp is live; attr is a fully initialised ibv_qp_attr we own.
        let rc = unsafe { (self.lib.ibv_modify_qp)(qp, attr, mask.0 as i32) };
        if rc != 0 {
            return Err(VerbsError::call(
                &self.name,
                op,
                io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    fn reg_host(
        &mut self,
        pd: *mut ibv_pd,
        len: usize,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let layout = Layout::from_size_align(len.max(1), page).map_err(|e| {
            VerbsError::call(
                &self.name,
                "buffer layout",
                io::Error::new(io::ErrorKind::InvalidInput, e),
            )
        })?;
        // SAFETY: layout has a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        if buf.is_null() {
            return Err(VerbsError::call(
                &self.name,
                "buffer allocation",
                io::Error::from(io::ErrorKind::OutOfMemory),
            ));
        }
        // SAFETY: pd is live; buf points to len writable bytes that stay allocated until the
        // MR is deregistered in Drop.
        let mr = unsafe { (self.lib.ibv_reg_mr)(pd, buf.cast(), len, access.0 as i32) };
        if mr.is_null() {
            let e = errno();
            // SAFETY: buf was allocated above with this layout and is not registered.
            unsafe { std::alloc::dealloc(buf, layout) };
            return Err(VerbsError::call(&self.name, "ibv_reg_mr", e));
        }
        self.mrs.push(Mr {
            mr,
            backing: Backing::Host { ptr: buf, layout },
        });
        // SAFETY: mr is the live MR just returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(MrInfo {
            addr: buf as u64,
            len: len as u64,
            lkey,
            rkey,
        })
    }
}

impl Verbs for RealDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_port(&mut self, port: u8) -> Result<PortInfo, VerbsError> {
        // SAFETY: ibv_port_attr is plain data; all-zero is a valid value.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is live and attr is a valid out-pointer of the size the inline passes.
        let rc = unsafe { self.lib.query_port(self.ctx, port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::call(
                &self.name,
                "ibv_query_port",
                io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        Ok(PortInfo {
            state: PortState::from_raw(attr.state),
            active_mtu: Mtu(attr.active_mtu),
            link_layer: LinkLayer::from_raw(attr.link_layer),
            lid: attr.lid,
            gid_tbl_len: u32::try_from(attr.gid_tbl_len).unwrap_or(0),
        })
    }

    fn query_gid(&mut self, port: u8, index: u32) -> Result<[u8; 16], VerbsError> {
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: ctx is live and gid is a valid out-pointer.
        let rc = unsafe { (self.lib.ibv_query_gid)(self.ctx, port, index as i32, &mut gid) };
        if rc != 0 {
            return Err(VerbsError::call(&self.name, "ibv_query_gid", errno()));
        }
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        Ok(unsafe { gid.raw })
    }

    fn query_gid_type(&mut self, port: u8, index: u32) -> Result<Option<GidType>, VerbsError> {
        // What rdma-core's ibv_query_gid_type reads; an empty entry has no readable type.
        let path = format!(
            "/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{index}",
            self.name
        );
        Ok(std::fs::read_to_string(path)
            .ok()
            .and_then(|t| GidType::parse(&t)))
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, VerbsError> {
        // SAFETY: ctx is live.
        let pd = unsafe { (self.lib.ibv_alloc_pd)(self.ctx) };
        if pd.is_null() {
            return Err(VerbsError::call(&self.name, "ibv_alloc_pd", errno()));
        }
        self.pds.push(pd);
        Ok(PdHandle(self.pds.len() as u32 - 1))
    }

    fn reg_mr(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
        mem: MemKind,
    ) -> Result<MrInfo, VerbsError> {
        let pd = self.pd(pd)?;
        match mem {
            MemKind::Host => self.reg_host(pd, len, access),
            #[cfg(feature = "cuda")]
            MemKind::Cuda { device } => {
                let (mr, buf) =
                    super::cuda::reg_cuda(self.lib, &self.name, pd, len, access, device)?;
                self.mrs.push(Mr {
                    mr,
                    backing: Backing::Cuda(buf),
                });
                // SAFETY: mr is the live MR just returned.
                let (addr, lkey, rkey) = unsafe { ((*mr).addr as u64, (*mr).lkey, (*mr).rkey) };
                Ok(MrInfo {
                    addr,
                    len: len as u64,
                    lkey,
                    rkey,
                })
            }
            #[cfg(not(feature = "cuda"))]
            MemKind::Cuda { .. } => Err(VerbsError::Unsupported {
                device: self.name.clone(),
                what: "GPU memory needs rund-check built with the `cuda` feature".into(),
            }),
        }
    }

    fn create_cq(&mut self, depth: u32) -> Result<CqHandle, VerbsError> {
        // SAFETY: ctx is live; no channel or context pointer is used.
        let cq = unsafe {
            (self.lib.ibv_create_cq)(self.ctx, depth as i32, ptr::null_mut(), ptr::null_mut(), 0)
        };
        if cq.is_null() {
            return Err(VerbsError::call(&self.name, "ibv_create_cq", errno()));
        }
        self.cqs.push(cq);
        Ok(CqHandle(self.cqs.len() as u32 - 1))
    }

    fn create_rc_qp(
        &mut self,
        pd: PdHandle,
        cq: CqHandle,
        caps: QpCaps,
    ) -> Result<QpInfo, VerbsError> {
        let (pd, cq) = (self.pd(pd)?, self.cq(cq)?);
        // SAFETY: ibv_qp_init_attr is plain data; all-zero (NULL pointers) is valid.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.cap = ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
        };
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        // SAFETY: pd and cq are live; init is initialised.
        let qp = unsafe { (self.lib.ibv_create_qp)(pd, &mut init) };
        if qp.is_null() {
            return Err(VerbsError::call(&self.name, "ibv_create_qp", errno()));
        }
        self.qps.push(qp);
        // SAFETY: qp is the live QP just created.
        let qpn = unsafe { (*qp).qp_num };
        Ok(QpInfo {
            handle: QpHandle(self.qps.len() as u32 - 1),
            qpn,
        })
    }

    fn modify_qp_init(&mut self, qp: QpHandle, a: &InitAttr) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain data; all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = a.pkey_index;
        attr.port_num = a.port;
        attr.qp_access_flags = a.access.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify(qp, &mut attr, mask, "ibv_modify_qp(INIT)")
    }

    fn modify_qp_rtr(&mut self, qp: QpHandle, a: &RtrAttr) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain data; all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = a.path_mtu.0;
        attr.dest_qp_num = a.dest_qpn;
        attr.rq_psn = a.rq_psn;
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        attr.min_rnr_timer = a.min_rnr_timer;
        attr.ah_attr.dlid = a.dlid;
        attr.ah_attr.sl = a.sl;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = a.port;
        if let Some(g) = a.grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ibv_gid { raw: g.dgid };
            attr.ah_attr.grh.sgid_index = g.sgid_index;
            attr.ah_attr.grh.hop_limit = g.hop_limit;
            attr.ah_attr.grh.traffic_class = g.traffic_class;
            attr.ah_attr.grh.flow_label = g.flow_label;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(qp, &mut attr, mask, "ibv_modify_qp(RTR)")
    }

    fn modify_qp_rts(&mut self, qp: QpHandle, a: &RtsAttr) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain data; all-zero is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = a.sq_psn;
        attr.timeout = a.timeout;
        attr.retry_cnt = a.retry_cnt;
        attr.rnr_retry = a.rnr_retry;
        attr.max_rd_atomic = a.max_rd_atomic;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(qp, &mut attr, mask, "ibv_modify_qp(RTS)")
    }

    fn post_write(&mut self, qp: QpHandle, w: &WriteWr) -> Result<(), VerbsError> {
        let qp = self.qp(qp)?;
        let mut sge = ibv_sge {
            addr: w.local_addr,
            length: w.len,
            lkey: w.lkey,
        };
        // SAFETY: ibv_send_wr is plain data (pointers and unions of integers); all-zero is
        // valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = w.wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.send_flags = if w.signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        wr.wr.rdma = rdma_t {
            remote_addr: w.remote_addr,
            rkey: w.rkey,
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: qp is live; wr and sge live across the call (the provider copies them).
        let rc = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::call(
                &self.name,
                "ibv_post_send",
                io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let cq = self.cq(cq)?;
        const BATCH: usize = 16;
        // SAFETY: ibv_wc is plain data; all-zero is valid.
        let mut wc: [ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
        let n = out.len().min(BATCH);
        // SAFETY: cq is live; wc has room for n entries.
        let ne = unsafe { ibv_poll_cq(cq, n as i32, wc.as_mut_ptr()) };
        if ne < 0 {
            return Err(VerbsError::call(
                &self.name,
                "ibv_poll_cq",
                io::Error::from_raw_os_error(-ne),
            ));
        }
        for (o, w) in out.iter_mut().zip(wc.iter()).take(ne as usize) {
            *o = Completion {
                wr_id: w.wr_id,
                status: w.status,
                vendor_err: w.vendor_err,
            };
        }
        Ok(ne as usize)
    }
}

impl Drop for RealDevice {
    fn drop(&mut self) {
        // Errors cannot be returned from Drop; destruction order is what matters.
        for qp in self.qps.drain(..).rev() {
            // SAFETY: qp was created by this device and is destroyed once.
            unsafe { (self.lib.ibv_destroy_qp)(qp) };
        }
        for cq in self.cqs.drain(..).rev() {
            // SAFETY: cq was created by this device; its QPs are gone.
            unsafe { (self.lib.ibv_destroy_cq)(cq) };
        }
        for m in self.mrs.drain(..).rev() {
            // SAFETY: m.mr is a live MR of this device, deregistered once.
            unsafe { (self.lib.ibv_dereg_mr)(m.mr) };
            match m.backing {
                Backing::Host { ptr, layout } => {
                    // SAFETY: allocated in reg_host with this layout; no longer registered.
                    unsafe { std::alloc::dealloc(ptr, layout) }
                }
                #[cfg(feature = "cuda")]
                Backing::Cuda(b) => drop(b),
            }
        }
        for pd in self.pds.drain(..).rev() {
            // SAFETY: pd was allocated by this device; its MRs and QPs are gone.
            unsafe { (self.lib.ibv_dealloc_pd)(pd) };
        }
        // SAFETY: ctx was opened by ibv_open_device and every child object is destroyed.
        unsafe { (self.lib.ibv_close_device)(self.ctx) };
    }
}
