//! Is a lease's owner still alive? A pid alone is not enough (pids are
//! reused), so an owner is (boot id, pid, start time in clock ticks since
//! boot): all three must match a running, non-zombie process.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub pid: i32,
    /// Field 22 of /proc/<pid>/stat.
    pub start_time: u64,
    /// /proc/sys/kernel/random/boot_id when the owner was recorded.
    pub boot_id: String,
}

/// The seam to /proc, so reclaim can be unit-tested with fake processes.
pub trait Liveness: Send + Sync {
    /// Start time of `pid`, or None if it does not exist or is a zombie.
    fn start_time(&self, pid: i32) -> Option<u64>;
    fn boot_id(&self) -> String;

    /// The owner record for a running `pid`.
    fn owner(&self, pid: i32) -> Option<Owner> {
        Some(Owner {
            pid,
            start_time: self.start_time(pid)?,
            boot_id: self.boot_id(),
        })
    }

    fn is_alive(&self, owner: &Owner) -> bool {
        owner.boot_id == self.boot_id() && self.start_time(owner.pid) == Some(owner.start_time)
    }
}

/// The real thing.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcLiveness;

impl Liveness for ProcLiveness {
    fn start_time(&self, pid: i32) -> Option<u64> {
        rund_sys::procfs::start_time(pid)
    }

    fn boot_id(&self) -> String {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_itself_and_not_a_reaped_child() {
        let me = std::process::id() as i32;
        let owner = ProcLiveness.owner(me).expect("own stat");
        assert!(ProcLiveness.is_alive(&owner));
        assert!(!ProcLiveness.is_alive(&Owner {
            start_time: owner.start_time + 1,
            ..owner.clone()
        }));
        assert!(!ProcLiveness.is_alive(&Owner {
            boot_id: "other-boot".into(),
            ..owner
        }));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(ProcLiveness.start_time(pid), None);
    }
}
