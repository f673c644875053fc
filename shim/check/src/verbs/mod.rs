//! The verbs backend seam. [`Verbs`] is one opened device with the handful of calls write_bw
//! needs; [`VerbsProvider`] lists and opens devices. Handles are small ids owned by the backend,
//! which frees everything (QPs, CQs, MRs, PD, device) in its `Drop`, in that order.

mod types;

#[cfg(feature = "verbs")]
pub mod real;
#[cfg(any(test, feature = "testing"))]
pub mod sim;

pub use types::*;

/// Errors of the verbs layer.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no RDMA devices found")]
    NoDevices,
    /// libibverbs could not be loaded: no verbs device can be used.
    #[error("no RDMA devices found: {0} (libibverbs comes with rdma-core; Debian: apt-get install libibverbs1 ibverbs-providers)")]
    NoLibrary(String),
    #[error("RDMA device {name} not found (available: {available})")]
    DeviceNotFound { name: String, available: String },
    #[error("{device}: {op} failed: {source}")]
    Call {
        device: String,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{device}: invalid {kind} handle {id}")]
    BadHandle {
        device: String,
        kind: &'static str,
        id: u32,
    },
    #[error("{device}: {what}")]
    Unsupported { device: String, what: String },
}

impl VerbsError {
    pub fn call(device: &str, op: &'static str, source: std::io::Error) -> Self {
        VerbsError::Call {
            device: device.to_string(),
            op,
            source,
        }
    }
}

/// One opened RDMA device.
pub trait Verbs {
    fn name(&self) -> &str;
    fn query_port(&mut self, port: u8) -> Result<PortInfo, VerbsError>;
    fn query_gid(&mut self, port: u8, index: u32) -> Result<[u8; 16], VerbsError>;
    /// The RoCE version of a GID entry; `None` for an empty entry or an unknown type.
    fn query_gid_type(&mut self, port: u8, index: u32) -> Result<Option<GidType>, VerbsError>;
    fn alloc_pd(&mut self) -> Result<PdHandle, VerbsError>;
    /// Allocates `len` bytes of `mem` and registers them with `access`.
    fn reg_mr(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
        mem: MemKind,
    ) -> Result<MrInfo, VerbsError>;
    fn create_cq(&mut self, depth: u32) -> Result<CqHandle, VerbsError>;
    fn create_rc_qp(
        &mut self,
        pd: PdHandle,
        cq: CqHandle,
        caps: QpCaps,
    ) -> Result<QpInfo, VerbsError>;
    fn modify_qp_init(&mut self, qp: QpHandle, attr: &InitAttr) -> Result<(), VerbsError>;
    fn modify_qp_rtr(&mut self, qp: QpHandle, attr: &RtrAttr) -> Result<(), VerbsError>;
    fn modify_qp_rts(&mut self, qp: QpHandle, attr: &RtsAttr) -> Result<(), VerbsError>;
    fn post_write(&mut self, qp: QpHandle, wr: &WriteWr) -> Result<(), VerbsError>;
    /// Polls up to `out.len()` completions; returns how many were written.
    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Completion]) -> Result<usize, VerbsError>;
}

/// Lists and opens devices.
pub trait VerbsProvider: Send + Sync {
    type Device: Verbs;
    /// Device names; `Err(NoDevices)` when there are none.
    fn device_names(&self) -> Result<Vec<String>, VerbsError>;
    fn open(&self, name: &str) -> Result<Self::Device, VerbsError>;
}
