//! What the init keeps for itself once the workload runs: nothing it does
//! not need to forward signals and reap. It is never more privileged than
//! the workload, which a workload with CAP_SYS_PTRACE could otherwise use.

const CAP_KILL: u32 = 5;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The overflow user of every Linux system: the pause process needs no more.
const NOBODY: u32 = 65534;

/// Drops to nobody with every capability set empty (bounding first, while
/// CAP_SETPCAP is still held), no_new_privs, not dumpable.
pub fn become_nobody() -> Result<(), String> {
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP with an integer; EINVAL past the last cap.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(format!("drop capability {cap} from the bounding set: {e}"));
        }
    }
    // SAFETY: plain syscalls on our own credentials.
    let ok = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setresgid(NOBODY, NOBODY, NOBODY) == 0
            && libc::setresuid(NOBODY, NOBODY, NOBODY) == 0
    };
    if !ok {
        return Err(format!(
            "become nobody: {}",
            std::io::Error::last_os_error()
        ));
    }
    drop_own();
    Ok(())
}

/// Non-dumpable, no_new_privs, and of its capabilities only CAP_KILL (if it
/// had it: the workload may change its uid later and still get signals).
pub fn drop_own() {
    // SAFETY: prctl with integer arguments only changes flags of this process.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget fills two CapData for version 3; both live across the call.
    if unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) } < 0 {
        return;
    }
    let kill = data[0].permitted & (1 << CAP_KILL);
    let keep = [
        CapData {
            effective: kill,
            permitted: kill,
            inheritable: 0,
        },
        CapData::default(),
    ];
    // SAFETY: as above; capset only lowers our own sets.
    unsafe { libc::syscall(libc::SYS_capset, &mut hdr, keep.as_ptr()) };
}
