//! Placing a process by writing `cgroup.procs` takes the kernel's global
//! threadgroup rwsem for writing, and the first writer after a quiet spell
//! waits a whole RCU grace period (rcu_sync) before it gets the lock: about
//! 10 ms on a small VM, more than the rest of Create. Writers that follow
//! within a grace period do not wait. `Cgroups::prime_attach` starts that
//! wait early, with a write that moves the caller into the cgroup it is
//! already in and so changes nothing, and the real placement a few ms later
//! finds the way open.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::hierarchy::{Hierarchy, V1Hierarchy};

/// The cgroup this process is in on the first v1 hierarchy, from
/// `/proc/self/cgroup`. `None` on v2 (an init is started in its cgroup
/// there: no placement write to prepare) or if not found.
pub(crate) fn own_dir(h: &Hierarchy, proc_self_cgroup: &str) -> Option<PathBuf> {
    let Hierarchy::V1 { hierarchies, .. } = h else {
        return None;
    };
    let first: &V1Hierarchy = hierarchies.first()?;
    let want: BTreeSet<&str> = first.controllers.iter().map(String::as_str).collect();
    proc_self_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let have: BTreeSet<&str> = ctrls.split(',').collect();
        (have == want).then(|| first.mount.join(path.trim_start_matches('/')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const SELF: &str = "\
13:name=systemd:/system.slice/containerd.service
12:pids:/system.slice/containerd.service
5:cpuacct,cpu:/system.slice
0::/system.slice/containerd.service
";

    #[test]
    fn finds_its_own_cgroup_on_the_first_hierarchy() {
        let cpu = V1Hierarchy {
            controllers: vec!["cpu".into(), "cpuacct".into()],
            mount: PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"),
        };
        let h = Hierarchy::V1 {
            hierarchies: vec![cpu],
            unified: None,
        };
        assert_eq!(
            own_dir(&h, SELF),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/system.slice"))
        );
        let h = Hierarchy::v1_at(Path::new("/sys/fs/cgroup"), &["name=systemd"]);
        assert_eq!(
            own_dir(&h, SELF),
            Some(PathBuf::from(
                "/sys/fs/cgroup/systemd/system.slice/containerd.service"
            ))
        );
        let h = Hierarchy::v1_at(Path::new("/sys/fs/cgroup"), &["blkio"]);
        assert_eq!(own_dir(&h, SELF), None, "no such line");
        let v2 = Hierarchy::v2_at(Path::new("/sys/fs/cgroup"));
        assert_eq!(own_dir(&v2, SELF), None, "nothing to prime on v2");
    }
}
