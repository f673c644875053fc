//! libibverbs, opened on first use: a shim that never checks an RDMA device
//! does not map it (nor libnl), and a node without rdma-core runs rund and
//! reports "no RDMA devices".

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};
use std::sync::OnceLock;

use rdma_sys::*;

use super::dl::Library;
use crate::verbs::VerbsError;

const SONAME: &std::ffi::CStr = c"libibverbs.so.1";

/// The table of entry points, and a compile-time check of each type against
/// rdma-sys's binding of verbs.h (an unused const leaves no reference, so the
/// binary does not link libibverbs).
macro_rules! entry_points {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        pub(crate) struct Verbs {
            _lib: Library,
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            /// IBVERBS_1.12 (rdma-core 34) and later.
            #[cfg(feature = "cuda")]
            pub(crate) ibv_reg_dmabuf_mr:
                Option<unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr>,
        }
        $(const _: unsafe extern "C" fn($($arg),*) $(-> $ret)? = rdma_sys::$name;)*
        const _: unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr =
            rdma_sys::ibv_reg_dmabuf_mr;

        impl Verbs {
            fn resolve(lib: Library) -> Result<Self, String> {
                $(let $name = {
                    let name = concat!(stringify!($name), "\0");
                    let cname = std::ffi::CStr::from_bytes_with_nul(name.as_bytes())
                        .expect("a literal C name");
                    let p = lib.symbol(cname).ok_or_else(|| {
                        format!("{} lacks {}", SONAME.to_string_lossy(), stringify!($name))
                    })?;
                    // SAFETY: p is libibverbs' default version of $name, whose C
                    // prototype is the one checked against rdma-sys above.
                    unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p)
                    }
                };)*
                #[cfg(feature = "cuda")]
                let ibv_reg_dmabuf_mr = lib.symbol(c"ibv_reg_dmabuf_mr").map(|p| {
                    // SAFETY: as above, for the optional ibv_reg_dmabuf_mr.
                    unsafe {
                        std::mem::transmute::<
                            *mut c_void,
                            unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr,
                        >(p)
                    }
                });
                Ok(Self {
                    _lib: lib,
                    $($name,)*
                    #[cfg(feature = "cuda")]
                    ibv_reg_dmabuf_mr,
                })
            }
        }
    };
}

entry_points! {
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list: fn(*mut *mut ibv_device);
    ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
    ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device: fn(*mut ibv_context) -> c_int;
    ibv_query_port: fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
}

static VERBS: OnceLock<Verbs> = OnceLock::new();

/// The loaded library, kept for the life of the process once loaded (its
/// providers are not safe to unload). A failure is not kept: rdma-core
/// installed later is found by a long-lived node shim's next check. Not
/// there: "no RDMA devices", with why.
pub(crate) fn verbs() -> Result<&'static Verbs, VerbsError> {
    if let Some(v) = VERBS.get() {
        return Ok(v);
    }
    let loaded = Library::open(SONAME)
        .and_then(Verbs::resolve)
        .map_err(VerbsError::NoLibrary)?;
    // A racing loader's copy is dropped: dlclose only drops its reference.
    Ok(VERBS.get_or_init(|| loaded))
}

impl Verbs {
    /// verbs.h's inline `ibv_query_port`: the provider's extended op when the
    /// context has one, else the exported call on the zeroed compat prefix.
    ///
    /// # Safety
    /// `ctx` is a live context from `ibv_open_device`.
    pub(crate) unsafe fn query_port(
        &self,
        ctx: *mut ibv_context,
        port: u8,
        attr: &mut ibv_port_attr,
    ) -> c_int {
        // SAFETY: the caller's ctx is live; an extended context is embedded
        // at the end of a verbs_context (abi_compat says which).
        let op = unsafe { extended_query_port(ctx) };
        match op {
            // SAFETY: the provider's op for this ctx, given the full struct's size.
            Some(op) => unsafe { op(ctx, port, attr, size_of::<ibv_port_attr>()) },
            None => {
                *attr = zeroed_port_attr();
                // SAFETY: the compat struct is a prefix of ibv_port_attr.
                unsafe { (self.ibv_query_port)(ctx, port, (attr as *mut ibv_port_attr).cast()) }
            }
        }
    }
}

type QueryPortEx = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;

/// verbs.h's `verbs_get_ctx_op(ctx, query_port)`.
///
/// # Safety
/// `ctx` is a live context from `ibv_open_device`.
unsafe fn extended_query_port(ctx: *mut ibv_context) -> Option<QueryPortEx> {
    // __VERBS_ABI_IS_EXTENDED: ((void *) UINT32_MAX).
    // SAFETY: ctx is live (the caller's contract).
    if unsafe { (*ctx).abi_compat } as usize != u32::MAX as usize {
        return None;
    }
    let vctx = ctx
        .cast::<u8>()
        .wrapping_sub(offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: an extended context is the `context` member of a verbs_context
    // whose `sz` says how much of it (counted back from its end) the
    // provider filled; fields are read only within that.
    unsafe {
        let filled = (*vctx).sz;
        if filled < size_of::<verbs_context>() - offset_of!(verbs_context, query_port) {
            return None;
        }
        (*vctx).query_port
    }
}

fn zeroed_port_attr() -> ibv_port_attr {
    // SAFETY: ibv_port_attr is plain data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}
