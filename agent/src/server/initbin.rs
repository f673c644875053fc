//! rund-init as a sealed memfd. The binary is built static and embedded in
//! the agent (see build.rs), so it always matches the agent and needs no
//! libc in the container. Run from a sealed memfd, the container's PID 1 is
//! not a host binary: nothing in the container can open it for writing
//! through /proc/1/exe (runc's CVE-2019-5736), and the copy cannot change
//! while containers use it. Made once per sandbox, on first use.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;

/// The static rund-init, built by build.rs.
static EMBEDDED: &[u8] = include_bytes!(env!("RUND_INIT_BIN"));

#[derive(Debug, thiserror::Error)]
pub enum InitBinError {
    #[error("rund-init is not a 64-bit ELF executable")]
    NotElf,
    #[error("rund-init is dynamically linked: it runs inside containers that may have no libc")]
    Dynamic,
    #[error("sealed copy of rund-init: {0}")]
    Memfd(std::io::Error),
}

#[derive(Default)]
pub struct InitBinary {
    sealed: Mutex<Option<OwnedFd>>,
}

impl InitBinary {
    /// The sealed copy made at once (by the launcher, before it enters the
    /// sandbox's user namespace).
    pub fn sealed() -> Result<Self, InitBinError> {
        let fd = seal_copy(EMBEDDED)?;
        Ok(InitBinary {
            sealed: Mutex::new(Some(fd)),
        })
    }

    /// A dup of the sealed copy, made the first time.
    pub fn get(&self) -> Result<OwnedFd, InitBinError> {
        let mut slot = self.sealed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = slot.as_ref() {
            return fd.try_clone().map_err(InitBinError::Memfd);
        }
        let fd = seal_copy(EMBEDDED)?;
        let dup = fd.try_clone().map_err(InitBinError::Memfd)?;
        *slot = Some(fd);
        Ok(dup)
    }
}

fn seal_copy(bytes: &[u8]) -> Result<OwnedFd, InitBinError> {
    check_static(bytes)?;
    let name = c"rund-init";
    // SAFETY: memfd_create takes a NUL-terminated name and flags; returns a new fd or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd from the kernel, owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes).map_err(InitBinError::Memfd)?;
    // Execute-only for others: whoever does not own the copy cannot read
    // it, which keeps an init exec'd by an unmapped owner's copy non-dumpable.
    // SAFETY: fchmod on our own memfd with a mode.
    if unsafe { libc::fchmod(fd, 0o711) } < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl(F_ADD_SEALS) on our memfd with integer flags.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    Ok(OwnedFd::from(file))
}

/// An ELF64 with no PT_INTERP program header needs no loader in the container.
fn check_static(b: &[u8]) -> Result<(), InitBinError> {
    const PT_INTERP: u32 = 3;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 {
        return Err(InitBinError::NotElf);
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().map_err(|_| InitBinError::NotElf)?);
    let (entsize, num) = (u16_at(0x36), u16_at(0x38));
    for i in 0..num {
        let off = phoff as usize + i * entsize;
        let typ = b
            .get(off..off + 4)
            .ok_or(InitBinError::NotElf)
            .map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))?;
        if typ == PT_INTERP {
            return Err(InitBinError::Dynamic);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_dynamic_binaries_are_told_apart() {
        // The test binary itself is dynamically linked.
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert!(matches!(check_static(&me), Err(InitBinError::Dynamic)));
        assert!(matches!(
            check_static(b"#!/bin/sh\n"),
            Err(InitBinError::NotElf)
        ));
        check_static(EMBEDDED).unwrap();
    }

    #[test]
    fn the_copy_is_sealed_against_writes() {
        let bin = InitBinary::default();
        let fd = bin.get().unwrap();
        let again = bin.get().unwrap();
        let mut f = std::fs::File::from(fd);
        assert!(f.write_all(b"x").is_err(), "sealed memfd accepted a write");
        drop(again);
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(path) {
            assert!(
                w.write_all(b"x").is_err(),
                "a reopened sealed copy took a write"
            );
        }
    }
}
