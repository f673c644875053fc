//! Raw `bpf(2)` for cgroup v2 device filters: load a
//! `BPF_PROG_TYPE_CGROUP_DEVICE` program, attach it to a cgroup directory
//! (replacing the one there atomically), query and detach. No BPF crate:
//! the five commands below are all a device filter needs.

mod insn;

#[cfg(test)]
pub(crate) use insn::op;
pub use insn::{decode_all, encode_all, Insn};

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 1 << 1;
const BPF_F_REPLACE: u32 = 1 << 2;

/// A failed bpf(2) command, with the verifier's log for a refused load.
#[derive(Debug)]
pub struct BpfError {
    pub call: &'static str,
    pub source: io::Error,
    pub log: String,
}

impl BpfError {
    fn new(call: &'static str, source: io::Error) -> Self {
        BpfError {
            call,
            source,
            log: String::new(),
        }
    }
}

/// `bpf(cmd, attr, sizeof attr)`; the attr is a plain repr(C) struct.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    loop {
        // SAFETY: `attr` is a live, exclusively borrowed repr(C) struct of the
        // layout the kernel expects for `cmd`, and its exact size is passed;
        // any pointers inside it point to buffers the caller keeps alive.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                attr as *mut T as *mut libc::c_void,
                std::mem::size_of::<T>() as libc::c_uint,
            )
        };
        if r >= 0 {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        // The verifier can be interrupted by a signal (EAGAIN since ~4.20).
        if e.raw_os_error() == Some(libc::EAGAIN) && cmd == BPF_PROG_LOAD {
            continue;
        }
        return Err(e);
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// Load a device filter. On refusal the error carries the verifier's log.
pub fn load_device_prog(insns: &[Insn]) -> Result<OwnedFd, BpfError> {
    let code = encode_all(insns);
    let license = b"Apache\0";
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"rund_dev");
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        ..Default::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(source) => {
            // Retry with the verifier log so the error says why.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            if let Ok(fd) = bpf(BPF_PROG_LOAD, &mut attr) {
                return Ok(owned(fd));
            }
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            Err(BpfError {
                call: "bpf(BPF_PROG_LOAD)",
                source,
                log: String::from_utf8_lossy(&log[..end]).trim().to_string(),
            })
        }
    }
}

#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// Attach `prog` to the cgroup with BPF_F_ALLOW_MULTI, replacing `old` in
/// place when given (BPF_F_REPLACE: there is no moment without a filter).
pub fn attach_device(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    old: Option<BorrowedFd<'_>>,
) -> Result<(), BpfError> {
    let mut attr = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
    };
    if let Some(old) = old {
        attr.attach_flags |= BPF_F_REPLACE;
        attr.replace_bpf_fd = old.as_raw_fd() as u32;
    }
    bpf(BPF_PROG_ATTACH, &mut attr)
        .map(drop)
        .map_err(|e| BpfError::new("bpf(BPF_PROG_ATTACH)", e))
}

/// Detach `prog` from the cgroup.
pub fn detach_device(cgroup: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> Result<(), BpfError> {
    let mut attr = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    bpf(BPF_PROG_DETACH, &mut attr)
        .map(drop)
        .map_err(|e| BpfError::new("bpf(BPF_PROG_DETACH)", e))
}

/// The query attr up to `revision`: kernels from 6.17 write that field
/// whatever size is passed, so it must be part of the struct.
#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
    prog_attach_flags: u64,
    link_ids: u64,
    link_attach_flags: u64,
    revision: u64,
}

/// Ids of the device programs attached to this cgroup itself (not the
/// ones it inherits).
pub fn query_device(cgroup: BorrowedFd<'_>) -> Result<Vec<u32>, BpfError> {
    // At most 64 programs can be attached to one cgroup and attach type.
    let mut ids = vec![0u32; 64];
    let mut attr = QueryAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..Default::default()
    };
    bpf(BPF_PROG_QUERY, &mut attr).map_err(|e| BpfError::new("bpf(BPF_PROG_QUERY)", e))?;
    ids.truncate(attr.prog_cnt as usize);
    Ok(ids)
}

#[repr(C)]
#[derive(Default)]
struct GetFdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// An fd for the program with this id.
pub fn prog_fd_by_id(id: u32) -> Result<OwnedFd, BpfError> {
    let mut attr = GetFdAttr {
        id,
        ..Default::default()
    };
    bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)
        .map(owned)
        .map_err(|e| BpfError::new("bpf(BPF_PROG_GET_FD_BY_ID)", e))
}

/// Put `prog` in place of whatever device filter is attached to the cgroup
/// itself, with no moment where none is attached: BPF_F_REPLACE when there
/// is exactly one old filter, else attach the new one, then detach the old.
pub fn replace_device_filter(cgroup: BorrowedFd<'_>, prog: &[Insn]) -> Result<(), BpfError> {
    let old = attached(cgroup)?;
    let new = load_device_prog(prog)?;
    if let [one] = old.as_slice() {
        match attach_device(cgroup, new.as_fd(), Some(one.as_fd())) {
            Ok(()) => return Ok(()),
            // Kernels before 5.6 have no BPF_F_REPLACE: fall through.
            Err(e) if e.source.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    attach_device(cgroup, new.as_fd(), None)?;
    for o in &old {
        detach_device(cgroup, o.as_fd())?;
    }
    Ok(())
}

/// Detach every device filter attached to the cgroup itself.
pub fn clear_device_filter(cgroup: BorrowedFd<'_>) -> Result<usize, BpfError> {
    let old = attached(cgroup)?;
    for o in &old {
        detach_device(cgroup, o.as_fd())?;
    }
    Ok(old.len())
}

/// Fds of the device programs attached to the cgroup itself. Programs this
/// process may not open (an LSM refuses) are skipped, as runc skips them:
/// another filter can only take access away.
fn attached(cgroup: BorrowedFd<'_>) -> Result<Vec<OwnedFd>, BpfError> {
    let mut out = Vec::new();
    for id in query_device(cgroup)? {
        match prog_fd_by_id(id) {
            Ok(fd) => out.push(fd),
            Err(e) if matches!(e.source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {}
            // Detached between the query and now.
            Err(e) if e.source.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
