//! rund-init as a sealed memfd. The binary is built static and embedded in
//! the agent (see build.rs), so it always matches the agent and needs no
//! libc in the container. Run from a sealed memfd, the container's PID 1 is
//! not a host binary: nothing in the container can open it for writing
//! through /proc/1/exe (runc's CVE-2019-5736), and the copy cannot change
//! while containers use it. Made once per sandbox, on first use (a
//! user-namespaced sandbox's file is made at launch, and filled then).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
    copy: Mutex<Copy>,
}

/// Where the sandbox's copy stands.
#[derive(Default)]
enum Copy {
    #[default]
    None,
    /// Its file made ahead, still empty.
    Blank(OwnedFd),
    Sealed(OwnedFd),
}

impl InitBinary {
    /// The copy's file made at once, empty, by the launcher before it enters
    /// the sandbox's user namespace: the file is then owned by an id the pod
    /// does not map. It is filled and sealed on first use, so a pod that runs
    /// no init pays neither the write nor the memory (1.1 MiB of shmem).
    pub fn reserved() -> Result<Self, InitBinError> {
        check_static(EMBEDDED)?;
        Ok(InitBinary {
            copy: Mutex::new(Copy::Blank(blank()?)),
        })
    }

    /// A dup of the sealed copy, made the first time.
    pub fn get(&self) -> Result<OwnedFd, InitBinError> {
        let mut slot = self.copy.lock().unwrap_or_else(|e| e.into_inner());
        let sealed = match std::mem::take(&mut *slot) {
            Copy::Sealed(fd) => fd,
            Copy::Blank(fd) => match fill_and_seal(&fd, EMBEDDED) {
                Ok(()) => fd,
                Err(e) => {
                    // Kept for the next try: a copy made now, inside the
                    // user namespace, would be the pod's to read.
                    *slot = Copy::Blank(fd);
                    return Err(e);
                }
            },
            Copy::None => seal_copy(EMBEDDED)?,
        };
        let dup = sealed.try_clone().map_err(InitBinError::Memfd);
        *slot = Copy::Sealed(sealed);
        dup
    }
}

fn seal_copy(bytes: &[u8]) -> Result<OwnedFd, InitBinError> {
    check_static(bytes)?;
    let fd = blank()?;
    fill_and_seal(&fd, bytes)?;
    Ok(fd)
}

/// An empty memfd that can be sealed, execute-only for others: whoever does
/// not own the copy cannot read it, which keeps an init exec'd by an
/// unmapped owner's copy non-dumpable.
fn blank() -> Result<OwnedFd, InitBinError> {
    let name = c"rund-init";
    // SAFETY: memfd_create takes a NUL-terminated name and flags; returns a new fd or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd from the kernel, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchmod on our own memfd with a mode.
    if unsafe { libc::fchmod(fd.as_raw_fd(), 0o711) } < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Writes `bytes` from offset 0 (a retry after a failed write starts over)
/// and seals the copy against any change. Writing needs no ownership of the
/// file: the fd was opened for writing when it was made.
fn fill_and_seal(fd: &OwnedFd, bytes: &[u8]) -> Result<(), InitBinError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd.try_clone().map_err(InitBinError::Memfd)?);
    file.write_all_at(bytes, 0).map_err(InitBinError::Memfd)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl(F_ADD_SEALS) on our memfd with integer flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(InitBinError::Memfd(std::io::Error::last_os_error()));
    }
    Ok(())
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
    use std::io::Write;

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
    fn a_reserved_copy_is_empty_until_first_use_then_the_embedded_binary_sealed() {
        use std::io::Read;
        let bin = InitBinary::reserved().unwrap();
        let size = |fd: &OwnedFd| nix::sys::stat::fstat(fd).unwrap().st_size;
        let blank = match &*bin.copy.lock().unwrap() {
            Copy::Blank(fd) => fd.try_clone().unwrap(),
            _ => panic!("not reserved"),
        };
        assert_eq!(size(&blank), 0, "nothing written ahead");
        let mode = nix::sys::stat::fstat(&blank).unwrap().st_mode & 0o7777;
        assert_eq!(mode, 0o711, "execute-only for others from the start");
        let fd = bin.get().unwrap();
        assert_eq!(size(&fd), EMBEDDED.len() as i64);
        let mut f = std::fs::File::from(fd);
        assert!(f.write_all(b"x").is_err(), "sealed memfd accepted a write");
        let path = format!("/proc/self/fd/{}", f.as_raw_fd());
        let mut back = Vec::new();
        std::fs::File::open(path)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == EMBEDDED, "the copy is the embedded rund-init");
        let again = bin.get().unwrap();
        assert_eq!(size(&again), EMBEDDED.len() as i64, "the same copy");
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
