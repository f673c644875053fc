//! GPU memory for write_bw (feature `cuda`). libcuda is dlopened at run time, so the crate
//! builds and runs without CUDA installed: `cuMemAlloc` allocates, `ibv_reg_dmabuf_mr`
//! registers a dma-buf of it, and plain `ibv_reg_mr` (nvidia-peermem) is the fallback.

use std::ffi::c_void;
use std::io;

use rdma_sys::*;

use super::dl::Library;
use super::libverbs::Verbs as LibVerbs;
use crate::verbs::{Access, VerbsError};

type CuResult = i32;
type CuDevicePtr = u64;
const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: i32 = 1;
/// GPU pages are 64 KiB; perftest rounds allocations up to them.
const GPU_PAGE: usize = 64 * 1024;

type FnU32 = unsafe extern "C" fn(u32) -> CuResult;
type FnI32 = unsafe extern "C" fn(i32) -> CuResult;
type FnDevGet = unsafe extern "C" fn(*mut i32, i32) -> CuResult;
type FnRetain = unsafe extern "C" fn(*mut *mut c_void, i32) -> CuResult;
type FnPtr = unsafe extern "C" fn(*mut c_void) -> CuResult;
type FnAlloc = unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult;
type FnFree = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
type FnHandle = unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, i32, u64) -> CuResult;

struct Api {
    /// Kept open while a buffer made with it lives.
    _lib: Library,
    init: FnU32,
    device_get: FnDevGet,
    primary_retain: FnRetain,
    primary_release: FnI32,
    ctx_set_current: FnPtr,
    mem_alloc: FnAlloc,
    mem_free: FnFree,
    /// Optional (CUDA ≥ 11.7).
    get_handle: Option<FnHandle>,
}

fn err(device: &str, op: &'static str, msg: String) -> VerbsError {
    VerbsError::call(device, op, io::Error::other(msg))
}

impl Api {
    fn load(device: &str) -> Result<Self, VerbsError> {
        let lib =
            Library::open(c"libcuda.so.1").map_err(|e| err(device, "dlopen(libcuda.so.1)", e))?;
        macro_rules! req {
            ($n:expr, $t:ty) => {{
                let Some(p) = lib.symbol($n) else {
                    return Err(err(device, "dlsym", format!("libcuda lacks {:?}", $n)));
                };
                // SAFETY: the symbol has the CUDA driver API signature of the field it fills.
                unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
            }};
        }
        Ok(Self {
            init: req!(c"cuInit", FnU32),
            device_get: req!(c"cuDeviceGet", FnDevGet),
            primary_retain: req!(c"cuDevicePrimaryCtxRetain", FnRetain),
            primary_release: req!(c"cuDevicePrimaryCtxRelease_v2", FnI32),
            ctx_set_current: req!(c"cuCtxSetCurrent", FnPtr),
            mem_alloc: req!(c"cuMemAlloc_v2", FnAlloc),
            mem_free: req!(c"cuMemFree_v2", FnFree),
            get_handle: lib.symbol(c"cuMemGetHandleForAddressRange").map(|p| {
                // SAFETY: cuMemGetHandleForAddressRange has this signature.
                unsafe { std::mem::transmute::<*mut c_void, FnHandle>(p) }
            }),
            _lib: lib,
        })
    }
}

/// A cuMemAlloc'd buffer (and its dma-buf fd), freed on drop.
pub struct CudaBuffer {
    api: Api,
    ordinal: i32,
    ptr: CuDevicePtr,
    dmabuf_fd: i32,
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.dmabuf_fd >= 0 {
            // SAFETY: the fd was returned by CUDA for us and is closed once.
            unsafe { libc::close(self.dmabuf_fd) };
        }
        if self.ptr != 0 {
            // SAFETY: ptr came from cuMemAlloc; the MR using it was deregistered first.
            unsafe { (self.api.mem_free)(self.ptr) };
        }
        // SAFETY: balances the cuDevicePrimaryCtxRetain in reg_cuda.
        unsafe { (self.api.primary_release)(self.ordinal) };
    }
}

/// Allocates `len` bytes on CUDA device `ordinal` and registers them.
pub(super) fn reg_cuda(
    lib: &LibVerbs,
    name: &str,
    pd: *mut ibv_pd,
    len: usize,
    access: Access,
    ordinal: i32,
) -> Result<(*mut ibv_mr, CudaBuffer), VerbsError> {
    let api = Api::load(name)?;
    let size = len.div_ceil(GPU_PAGE) * GPU_PAGE;
    let check = |rc: CuResult, op: &'static str| {
        if rc == 0 {
            Ok(())
        } else {
            Err(err(name, op, format!("CUresult {rc}")))
        }
    };
    // SAFETY: plain driver API calls with valid out-pointers.
    check(unsafe { (api.init)(0) }, "cuInit")?;
    let mut dev = 0;
    // SAFETY: as above.
    let rc = unsafe { (api.device_get)(&mut dev, ordinal) };
    check(rc, "cuDeviceGet")?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: as above.
    let rc = unsafe { (api.primary_retain)(&mut ctx, dev) };
    check(rc, "cuDevicePrimaryCtxRetain")?;
    let mut buf = CudaBuffer {
        api,
        ordinal: dev,
        ptr: 0,
        dmabuf_fd: -1,
    };
    // SAFETY: ctx was just retained.
    check(unsafe { (buf.api.ctx_set_current)(ctx) }, "cuCtxSetCurrent")?;
    let mut ptr = 0;
    // SAFETY: valid out-pointer; size > 0.
    check(unsafe { (buf.api.mem_alloc)(&mut ptr, size) }, "cuMemAlloc")?;
    buf.ptr = ptr;
    if let Some(gh) = buf.api.get_handle {
        let mut fd: i32 = -1;
        // SAFETY: ptr/size describe our allocation; fd is a valid out-pointer.
        let rc = unsafe {
            gh(
                (&mut fd as *mut i32).cast(),
                ptr,
                size,
                CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        if rc == 0 && fd >= 0 {
            buf.dmabuf_fd = fd;
            if let Some(reg_dmabuf) = lib.ibv_reg_dmabuf_mr {
                // SAFETY: pd is live; fd is a dma-buf of `size` bytes mapped at iova ptr.
                let mr = unsafe { reg_dmabuf(pd, 0, size, ptr, fd, access.0 as i32) };
                if !mr.is_null() {
                    return Ok((mr, buf));
                }
            }
        }
    }
    // Fallback: peer memory (nvidia-peermem) registration of the device pointer.
    // SAFETY: pd is live; ptr is a device address the peer-memory client can pin.
    let mr = unsafe { (lib.ibv_reg_mr)(pd, ptr as *mut c_void, size, access.0 as i32) };
    if mr.is_null() {
        return Err(VerbsError::call(
            name,
            "ibv_reg_mr(GPU memory; dma-buf unavailable, needs nvidia-peermem)",
            io::Error::last_os_error(),
        ));
    }
    Ok((mr, buf))
}
