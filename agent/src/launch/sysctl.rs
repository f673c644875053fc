//! Pod-level sysctls (the CRI pod sandbox's `linux.sysctl`, and what rund
//! adds for user-namespaced pods), written in the pod's namespaces with the
//! container checks (`rund_proto::sysctl`, never a key of the host's). A
//! namespace the launcher joined belongs to the host's user namespace, so
//! its keys are written before the sandbox's own user namespace exists; the
//! rest once the sandbox's namespaces are made.

use std::os::fd::AsFd;

use crate::container::sysctl::{open_proc_sys, own_namespaces, write_sysctls, SysctlWriteError};

/// Writes the sysctls for which `now(namespace)` says so.
pub fn write_where(
    sysctls: &[(String, String)],
    userns: bool,
    now: impl Fn(&str) -> bool,
) -> Result<(), SysctlWriteError> {
    let these: Vec<(String, String)> = sysctls
        .iter()
        .filter(|(k, _)| rund_proto::sysctl::namespace_of(k).is_some_and(&now))
        .cloned()
        .collect();
    if these.is_empty() {
        return Ok(());
    }
    let proc_sys = open_proc_sys()?;
    write_sysctls(proc_sys.as_fd(), &these, &own_namespaces(userns))
}
