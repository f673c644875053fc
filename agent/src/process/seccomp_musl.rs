//! The static agent is linked against musl (its start-up makes no `cpuid`
//! calls, which a VM traps: glibc's cost 0.85 ms per exec here) with
//! Debian's glibc-built `libseccomp.a`. That archive's one glibc-only
//! symbol is `__fprintf_chk` (FORTIFY's fprintf), used only by
//! `seccomp_export_pfc`, which rund never calls: it fails if it ever is.

use std::ffi::{c_char, c_int, c_void};

/// Reads only its fixed arguments (the SysV ABI lets a callee ignore the
/// variadic rest) and reports an error, as a failed fprintf does.
#[no_mangle]
extern "C" fn __fprintf_chk(_stream: *mut c_void, _flag: c_int, _format: *const c_char) -> c_int {
    -1
}
