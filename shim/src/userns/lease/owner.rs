//! Is a lease's owner still alive? A pid alone is not enough (pids are
//! reused), so an owner is (boot id, pid, start time in clock ticks since
//! boot): all three must match a running, non-zombie process.

use std::time::Duration;

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

/// Slack for a start time counted in whole clock ticks (10 ms at 100 Hz)
/// and a file's mtime from the coarse clock (a jiffy, at most 10 ms): an
/// owner that started after the file cannot come out more than this older.
const AGE_SLACK: Duration = Duration::from_millis(20);

/// Whether `owner` began clearly more than `age` ago: `now` is the time
/// since boot (CLOCK_BOOTTIME, the clock of a start time) and `hz` the
/// clock ticks per second.
pub fn began_before(owner: &Owner, age: Duration, now: Duration, hz: u64) -> bool {
    let started = Duration::from_secs_f64(owner.start_time as f64 / hz.max(1) as f64);
    now.saturating_sub(started) > age + AGE_SLACK
}

/// [`began_before`] against this machine's clocks; false when they cannot
/// be read.
pub fn began_before_now(owner: &Owner, age: Duration) -> bool {
    use nix::time::{clock_gettime, ClockId};
    use nix::unistd::{sysconf, SysconfVar};
    let (Ok(now), Ok(Some(hz))) = (
        clock_gettime(ClockId::CLOCK_BOOTTIME),
        sysconf(SysconfVar::CLK_TCK),
    ) else {
        return false;
    };
    began_before(owner, age, now.into(), hz as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks: u64) -> Owner {
        Owner {
            pid: 7,
            start_time: ticks,
            boot_id: "b".into(),
        }
    }

    /// 100 Hz: an owner started at 10 s, seen at 20 s, is 10 s old.
    #[test]
    fn an_owner_began_before_an_age_only_beyond_the_slack() {
        let now = Duration::from_secs(20);
        assert!(began_before(&at(1000), Duration::from_secs(9), now, 100));
        assert!(!began_before(&at(1000), Duration::from_secs(10), now, 100));
        assert!(began_before(
            &at(1000),
            Duration::from_millis(9_950),
            now,
            100
        ));
        assert!(!began_before(
            &at(1000),
            Duration::from_millis(9_990),
            now,
            100
        ));
        // Started after the age began (younger): never.
        assert!(!began_before(&at(1900), Duration::from_secs(5), now, 100));
        // A start time past `now` (clock skew) is not "before".
        assert!(!began_before(&at(3000), Duration::ZERO, now, 100));
    }

    #[test]
    fn this_process_began_before_no_age_beyond_its_own() {
        let me = ProcLiveness.owner(std::process::id() as i32).unwrap();
        assert!(!began_before_now(&me, Duration::from_secs(3600 * 24 * 365)));
        let init = ProcLiveness.owner(1).unwrap();
        assert!(began_before_now(&init, Duration::from_millis(1)));
    }

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
