//! Shell snippets run inside containers and the parsers of what they print: device nodes
//! (`stat`), open/mknod probes (device cgroup allow vs deny), `/proc/self/limits`.

/// What busybox prints for EPERM.
pub const EPERM_TEXT: &str = "Operation not permitted";

/// `path major:minor` lines of `stat -c '%n %t:%T'` (hex), as (path, major, minor).
pub fn parse_stat(out: &str) -> Vec<(String, i64, i64)> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("node ")?;
            let (path, mm) = rest.rsplit_once(' ')?;
            let (ma, mi) = mm.split_once(':')?;
            Some((
                path.to_owned(),
                i64::from_str_radix(ma, 16).ok()?,
                i64::from_str_radix(mi, 16).ok()?,
            ))
        })
        .collect()
}

/// Shell that prints `node <path> <major>:<minor>` (hex) for each existing path.
pub fn stat_script(paths: &[&str]) -> String {
    let list = paths.join(" ");
    format!("for p in {list}; do if [ -e $p ]; then stat -c 'node %n %t:%T' $p; fi; done; ")
}

/// Shell that prints `probe <tag>: <error or ok>` after opening `path` for reading.
pub fn open_probe(tag: &str, path: &str) -> String {
    format!("r=$(cat {path} 2>&1 >/dev/null) && r=ok; echo \"probe {tag}: $r\"; ")
}

/// Shell that mknods `c major:minor` under /dev and opens it; prints `probe <tag>: ...`.
pub fn mknod_probe(tag: &str, major: i64, minor: i64) -> String {
    format!(
        "r=$( {{ busybox mknod /dev/probe-{tag} c {major} {minor} && cat /dev/probe-{tag} >/dev/null; }} 2>&1 ) && r=ok; echo \"probe {tag}: $r\"; "
    )
}

/// The result of probe `tag` in the container's output.
pub fn probe<'a>(out: &'a str, tag: &str) -> &'a str {
    let p = format!("probe {tag}: ");
    out.lines()
        .find_map(|l| l.strip_prefix(&p))
        .unwrap_or_else(|| panic!("no probe {tag} in {out:?}"))
}

/// An injected node passes the device cgroup: whatever open says, it is not EPERM.
pub fn assert_allowed(out: &str, tag: &str) {
    let r = probe(out, tag);
    assert!(
        !r.contains(EPERM_TEXT),
        "{tag}: injected, must pass the device cgroup: {r}"
    );
}

pub fn assert_denied(out: &str, tag: &str) {
    let r = probe(out, tag);
    assert!(
        r.contains(EPERM_TEXT),
        "{tag}: not injected, the device cgroup must refuse it (EPERM): {r}"
    );
}

/// "Max locked memory" (soft, hard) from a `/proc/self/limits` dump.
pub fn locked_memory(limits: &str) -> (String, String) {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap_or_else(|| panic!("no memlock line in {limits:?}"));
    let f: Vec<&str> = line["Max locked memory".len()..]
        .split_whitespace()
        .collect();
    (f[0].to_owned(), f[1].to_owned())
}

/// Whether this process (so containerd and its shims) may raise hard limits: CAP_SYS_RESOURCE
/// (bit 24 of CapEff), or an unlimited hard memlock already.
pub fn can_raise_limits() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1 << CAP_SYS_RESOURCE) != 0 || memlock_hard() == u64::MAX
}

/// The hard RLIMIT_MEMLOCK of this process (so of containerd and its shims).
pub fn memlock_hard() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .unwrap()
        .1
}
