//! rund-probe: what a hostile process can reach, run by the security tests as an unprivileged
//! host user or as a container's workload (busybox has no unix-socket client and no ptrace).
//! Prints one result per line; the test decides what is allowed.
//!
//! - `rund-probe sockets [--shim PID] INODE...`: every socket of `/proc/net/unix` (of the
//!   caller's network namespace) whose inode is listed or whose abstract name or file name
//!   mentions rund: `sock INODE NAME FLAGS RESULT`, RESULT being `unnamed`, `connected` or
//!   `refused:ERRNO`; with `--shim`, each `@rund-agent-PID-N` name: `name NAME RESULT`.
//! - `rund-probe ptrace PID`: `status PID|self KEY VALUE` for Name, Cap*, Seccomp* and
//!   NoNewPrivs of PID and of itself, `mem RESULT` (open of /proc/PID/mem, which needs
//!   ptrace-attach access) and `attach RESULT` (PTRACE_ATTACH, detached at once if it worked).

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = match args.first().map(String::as_str) {
        Some("sockets") => sockets(&args[1..]),
        Some("ptrace") => ptrace(&args[1..]),
        _ => Err("usage: rund-probe sockets [--shim PID] INODE... | ptrace PID".into()),
    };
    match out {
        Ok(lines) => {
            let mut o = std::io::stdout().lock();
            for l in lines {
                let _ = writeln!(o, "{l}");
            }
        }
        Err(e) => {
            eprintln!("rund-probe: {e}");
            std::process::exit(2);
        }
    }
}

fn ids() -> String {
    // SAFETY: getuid/geteuid only read the caller's credentials.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    format!("uid {uid} {euid}")
}

fn sockets(args: &[String]) -> Result<Vec<String>, String> {
    let mut shim = None;
    let mut inodes = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--shim" {
            shim = Some(it.next().ok_or("--shim needs a pid")?.clone());
        } else {
            inodes.push(a.clone());
        }
    }
    let table =
        std::fs::read_to_string("/proc/net/unix").map_err(|e| format!("/proc/net/unix: {e}"))?;
    let mut out = vec![ids()];
    // Num RefCount Protocol Flags Type St Inode [Path]
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 7 {
            continue;
        }
        let (flags, inode) = (f[3], f[6]);
        let name = f.get(7).copied().unwrap_or("");
        // rund's old abstract names, and any socket file named after rund.
        let rund_name = name.starts_with('@') && name.contains("rund")
            || name.rsplit('/').next().is_some_and(|f| f.contains("rund"));
        if !inodes.iter().any(|i| i == inode) && !rund_name {
            continue;
        }
        let result = if name.is_empty() {
            "unnamed".to_string()
        } else {
            connect(name)
        };
        let shown = if name.is_empty() { "-" } else { name };
        out.push(format!("sock {inode} {shown} {flags} {result}"));
    }
    if let Some(pid) = shim {
        for n in 0..8 {
            let name = format!("@rund-agent-{pid}-{n}");
            out.push(format!("name {name} {}", connect(&name)));
        }
    }
    Ok(out)
}

/// Connects to a /proc/net/unix name: `@x` is abstract, anything else a path.
fn connect(name: &str) -> String {
    let addr = match name.strip_prefix('@') {
        Some(a) => SocketAddr::from_abstract_name(a.as_bytes()),
        None => SocketAddr::from_pathname(name),
    };
    match addr.and_then(|a| UnixStream::connect_addr(&a)) {
        Ok(_) => "connected".into(),
        Err(e) => format!("refused:{}", e.raw_os_error().unwrap_or(0)),
    }
}

fn ptrace(args: &[String]) -> Result<Vec<String>, String> {
    let pid: i32 = args
        .first()
        .and_then(|p| p.parse().ok())
        .ok_or("ptrace needs a pid")?;
    let mut out = vec![ids()];
    for (who, path) in [
        (pid.to_string(), format!("/proc/{pid}/status")),
        ("self".to_string(), "/proc/self/status".to_string()),
    ] {
        let s = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        for l in s.lines() {
            if let Some((k, v)) = l.split_once(':') {
                if k.starts_with("Cap")
                    || k.starts_with("Seccomp")
                    || k == "NoNewPrivs"
                    || k == "Name"
                {
                    out.push(format!("status {who} {k} {}", v.trim()));
                }
            }
        }
    }
    out.push(match std::fs::File::open(format!("/proc/{pid}/mem")) {
        Ok(_) => "mem opened".into(),
        Err(e) => format!("mem refused:{}", e.raw_os_error().unwrap_or(0)),
    });
    // SAFETY: PTRACE_ATTACH takes a pid and ignores addr/data.
    let r = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) };
    if r < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        out.push(format!("attach refused:{e}"));
    } else {
        let mut st = 0;
        // SAFETY: waits for the attach stop of our new tracee; `st` outlives the call.
        unsafe { libc::waitpid(pid, &mut st, libc::__WALL) };
        // SAFETY: detaches the tracee we attached, letting it run on.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
        out.push("attach attached".into());
    }
    Ok(out)
}
