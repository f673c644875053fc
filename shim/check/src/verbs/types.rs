//! Plain data passed through the [`super::Verbs`] trait, with perftest's QP attributes as
//! constructors so both backends see exactly the same values.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdHandle(pub u32);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqHandle(pub u32);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpHandle(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Unknown(u32),
}

impl PortState {
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            x => PortState::Unknown(x),
        }
    }
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortState::Unknown(x) => write!(f, "UNKNOWN({x})"),
            other => write!(f, "{}", format!("{other:?}").to_uppercase()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LinkLayer {
    Unspecified,
    InfiniBand,
    Ethernet,
}

impl LinkLayer {
    /// `IBV_LINK_LAYER_*` values from verbs.h.
    pub fn from_raw(v: u8) -> Self {
        match v {
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
}

/// `enum ibv_mtu`: 1 = 256 B ... 5 = 4096 B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mtu(pub u32);

impl Mtu {
    pub fn bytes(self) -> u32 {
        match self.0 {
            1..=5 => 128 << self.0,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortInfo {
    pub state: PortState,
    pub active_mtu: Mtu,
    pub link_layer: LinkLayer,
    pub lid: u16,
    /// Entries in the port's GID table.
    pub gid_tbl_len: u32,
}

/// The RoCE version of a GID table entry (sysfs `gid_attrs/types/<i>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GidType {
    /// `IB/RoCE v1`.
    IbRoceV1,
    /// `RoCE v2`.
    RoceV2,
}

impl GidType {
    pub fn parse(s: &str) -> Option<GidType> {
        match s.trim() {
            "IB/RoCE v1" => Some(GidType::IbRoceV1),
            "RoCE v2" => Some(GidType::RoceV2),
            _ => None,
        }
    }
}

/// `IBV_ACCESS_*` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_READ: Access = Access(4);

    pub const fn union(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
    pub fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
}

/// Where the registered buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Host,
    /// CUDA device memory (feature `cuda`): dma-buf registration, else peer memory.
    Cuda {
        device: i32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub handle: QpHandle,
    pub qpn: u32,
}

/// INIT: pkey index 0, the port, REMOTE_WRITE (perftest `ctx_modify_qp_to_init`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    pub pkey_index: u16,
    pub port: u8,
    pub access: Access,
}

impl InitAttr {
    pub fn perftest_write(port: u8) -> Self {
        Self {
            pkey_index: 0,
            port,
            access: Access::REMOTE_WRITE,
        }
    }
}

/// The global route header, used on RoCE (and when a GID index is forced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// RTR: the active MTU, remote qpn/psn, max_dest_rd_atomic 1, min_rnr_timer 12, GRH on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    pub port: u8,
    pub path_mtu: Mtu,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub dlid: u16,
    pub sl: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub grh: Option<Grh>,
}

impl RtrAttr {
    pub fn perftest(port: u8, path_mtu: Mtu, dest_qpn: u32, rq_psn: u32, dlid: u16) -> Self {
        Self {
            port,
            path_mtu,
            dest_qpn,
            rq_psn,
            dlid,
            sl: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            grh: None,
        }
    }
}

/// RTS: timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    pub sq_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    pub fn perftest(sq_psn: u32) -> Self {
        Self {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

/// One RDMA WRITE with a single SGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteWr {
    pub wr_id: u64,
    pub local_addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub signaled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    pub wr_id: u64,
    pub status: u32,
    pub vendor_err: u32,
}

pub const WC_SUCCESS: u32 = 0;
pub const WC_WR_FLUSH_ERR: u32 = 5;
pub const WC_RETRY_EXC_ERR: u32 = 12;

/// `ibv_wc_status_str` names, kept locally so the simulated backend and the error text agree.
pub fn wc_status_name(status: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "IBV_WC_SUCCESS",
        "IBV_WC_LOC_LEN_ERR",
        "IBV_WC_LOC_QP_OP_ERR",
        "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",
        "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR",
        "IBV_WC_REM_INV_REQ_ERR",
        "IBV_WC_REM_ACCESS_ERR",
        "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR",
        "IBV_WC_REM_INV_RD_REQ_ERR",
        "IBV_WC_REM_ABORT_ERR",
        "IBV_WC_INV_EECN_ERR",
        "IBV_WC_INV_EEC_STATE_ERR",
        "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR",
        "IBV_WC_GENERAL_ERR",
        "IBV_WC_TM_ERR",
        "IBV_WC_TM_RNDV_INCOMPLETE",
    ];
    NAMES
        .get(status as usize)
        .copied()
        .unwrap_or("IBV_WC_UNKNOWN")
}
