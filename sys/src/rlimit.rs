//! The rlimits by their OCI names, and prlimit(2).

use nix::errno::Errno;

/// A resource number as prlimit(2) takes it.
pub type Resource = libc::__rlimit_resource_t;

/// Every rlimit an OCI spec may name.
pub const NAMES: [(&str, Resource); 16] = [
    ("RLIMIT_AS", libc::RLIMIT_AS),
    ("RLIMIT_CORE", libc::RLIMIT_CORE),
    ("RLIMIT_CPU", libc::RLIMIT_CPU),
    ("RLIMIT_DATA", libc::RLIMIT_DATA),
    ("RLIMIT_FSIZE", libc::RLIMIT_FSIZE),
    ("RLIMIT_LOCKS", libc::RLIMIT_LOCKS),
    ("RLIMIT_MEMLOCK", libc::RLIMIT_MEMLOCK),
    ("RLIMIT_MSGQUEUE", libc::RLIMIT_MSGQUEUE),
    ("RLIMIT_NICE", libc::RLIMIT_NICE),
    ("RLIMIT_NOFILE", libc::RLIMIT_NOFILE),
    ("RLIMIT_NPROC", libc::RLIMIT_NPROC),
    ("RLIMIT_RSS", libc::RLIMIT_RSS),
    ("RLIMIT_RTPRIO", libc::RLIMIT_RTPRIO),
    ("RLIMIT_RTTIME", libc::RLIMIT_RTTIME),
    ("RLIMIT_SIGPENDING", libc::RLIMIT_SIGPENDING),
    ("RLIMIT_STACK", libc::RLIMIT_STACK),
];

/// The resource an OCI name ("RLIMIT_MEMLOCK") stands for.
pub fn resource(name: &str) -> Option<Resource> {
    NAMES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

/// A limit as rund's messages print it: bytes (or count), or "unlimited".
pub fn show(v: u64) -> String {
    if v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// `prlimit(pid, res, new, &old)` (pid 0: this process): sets `(soft, hard)`
/// when `new` is given, and returns the limits in force before.
pub fn prlimit(pid: i32, res: Resource, new: Option<(u64, u64)>) -> Result<(u64, u64), Errno> {
    let new = new.map(|(soft, hard)| libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    });
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let newp = new.as_ref().map_or(std::ptr::null(), |n| n as *const _);
    // SAFETY: prlimit reads `new` (or nothing) and writes `old`, both valid
    // for the call.
    Errno::result(unsafe { libc::prlimit(pid, res, newp, &mut old) })?;
    Ok((old.rlim_cur, old.rlim_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_resources() {
        assert_eq!(resource("RLIMIT_MEMLOCK"), Some(libc::RLIMIT_MEMLOCK));
        assert_eq!(resource("RLIMIT_NOFILE"), Some(libc::RLIMIT_NOFILE));
        assert_eq!(resource("RLIMIT_BOGUS"), None);
        assert_eq!(resource("memlock"), None);
        let mut all: Vec<Resource> = NAMES.iter().map(|(_, r)| *r).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 16, "one entry per resource");
    }

    #[test]
    fn shows_infinity_as_unlimited() {
        assert_eq!(show(libc::RLIM_INFINITY), "unlimited");
        assert_eq!(show(4096), "4096");
    }

    #[test]
    fn lowers_a_childs_limit_and_reads_it_back() {
        // `cat` lives until its stdin closes.
        let stdin = std::process::Stdio::piped();
        let mut cat = std::process::Command::new("cat")
            .stdin(stdin)
            .spawn()
            .unwrap();
        let pid = cat.id() as i32;
        prlimit(pid, libc::RLIMIT_NOFILE, Some((64, 128))).unwrap();
        assert_eq!(prlimit(pid, libc::RLIMIT_NOFILE, None).unwrap(), (64, 128));
        drop(cat.stdin.take());
        cat.wait().unwrap();
        assert_eq!(prlimit(pid, libc::RLIMIT_NOFILE, None), Err(Errno::ESRCH));
    }
}
