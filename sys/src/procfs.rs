//! `/proc/<pid>/stat`: the fields rund needs, parsed in one place.

/// What rund reads from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: R, S, D, Z, X, ...
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 22: clock ticks after boot. With the pid and the boot id it
    /// names one process, against pid reuse.
    pub start_time: u64,
}

impl Stat {
    /// A zombie or a dead process: gone but for its pid.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses a /proc/<pid>/stat line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after the last ')'.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let mut state = fields.next()?.chars(); // field 3
    let (Some(s), None) = (state.next(), state.next()) else {
        return None;
    };
    let ppid = fields.next()?.parse().ok()?; // field 4
                                             // Fields 5..=21 precede starttime (22).
    let start_time = fields.nth(17)?.parse().ok()?;
    Some(Stat {
        state: s,
        ppid,
        start_time,
    })
}

/// `/proc/<pid>/stat` of a process, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Start time of a live process: None for zombies and gone ones.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).filter(|s| !s.is_dead()).map(|s| s.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_after_the_last_paren_and_knows_zombies() {
        let line = "42 (a) b) c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'S',
                ppid: 7,
                start_time: 98765
            }
        );
        assert!(!s.is_dead());
        assert!(parse_stat(&line.replace(") S ", ") Z ")).unwrap().is_dead());
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 0 1"), None, "truncated");
        assert_eq!(parse_stat(&line.replace(") S ", ") SS ")), None);
    }

    #[test]
    fn sees_itself_and_not_a_reaped_child() {
        let me = stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        assert_eq!(start_time(std::process::id() as i32), Some(me.start_time));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(start_time(pid), None);
        assert_eq!(stat(0), None);
    }
}
