//! `start`: print the address of the shim serving this container's pod,
//! starting one if none serves it yet, as a plain address or as containerd
//! 2.x's JSON bootstrap params (see [`super::bootstrap`]). stdout and stderr
//! both reach containerd as the reply: print nothing else. The server is a
//! fork of this process, not a second exec of the binary. In per-node mode
//! the node's shim serves the pod ([`super::node`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, pipe2, setsid, ForkResult, Pid};

use super::flags::Flags;
use crate::config::{RundConfig, ShimMode};

use super::bootstrap;
use super::error::EntryError;

/// Tells the server which reply `start` gave, for its log.
pub const STARTED_AS_ENV: &str = "RUND_SHIM_STARTED_AS";

pub fn run(flags: &Flags) -> Result<(), EntryError> {
    let bundle = std::env::current_dir().map_err(EntryError::Cwd)?;
    // Create reports a bad config.json properly.
    let spec = crate::spec::load(&bundle).ok();
    let grouping = match &spec {
        Some(spec) => crate::spec::grouping_id(spec, &flags.id),
        None => flags.id.clone(),
    };
    // containerd writes the runtime's options (ConfigPath) on our stdin: the
    // sandbox API has no Create that would carry them, and `delete` gets none.
    let config_path = config_path_from_stdin();
    if let Some(p) = &config_path {
        let _ = crate::record::config_path(&bundle, p);
    }
    let address = super::socket_address(flags, &grouping);
    let reply = bootstrap::choose(&flags.publish_binary);
    let path = address.trim_start_matches("unix://").to_string();
    if UnixStream::connect(&path).is_err() {
        let config = RundConfig::load(config_path.as_deref().map(Path::new));
        // A bad config is reported by Create, as in per-pod mode.
        let per_node = matches!(&config, Ok(c) if c.shim.mode == ShimMode::PerNode);
        if per_node {
            let state_dir = config.map(|c| c.state_dir).unwrap_or_default();
            super::node::hand_over(flags, &state_dir, &address, config_path)?;
        } else {
            let head_start = match (&config, &spec) {
                (Ok(c), Some(spec)) if c.sandbox.head_start => {
                    crate::task::head_start_plan(spec, c, &flags.id)
                }
                _ => None,
            };
            let cgroup_head = match (&config, &spec) {
                (Ok(c), Some(spec)) if c.sandbox.head_start => {
                    crate::task::cgroup_head_plan(spec, &flags.id)
                }
                _ => None,
            };
            let server = Server {
                started_as: reply.name(),
                config_path,
                head_start,
                cgroup_head,
                config: config.ok(),
            };
            start_pod_server(flags, &address, server)?;
        }
    }
    write_address(&bundle, &address)?;
    std::io::stdout()
        .write_all(reply.render(&address).as_bytes())
        .and_then(|_| std::io::stdout().flush())
        .map_err(EntryError::WriteAddress)?;
    Ok(())
}

/// What `start` tells the pod's server it forks.
struct Server {
    started_as: &'static str,
    config_path: Option<String>,
    /// Launch the pod's agent at once ([`super::serve::HEAD_START`]).
    head_start: Option<crate::task::HeadPlan>,
    /// Make the pod's cgroup at once (`task::early_cgroup::head`).
    cgroup_head: Option<crate::task::CgroupHeadPlan>,
    /// The config `start` read: the forked server need not read it again.
    config: Option<RundConfig>,
}

/// Forks this pod's own server and waits until it listens.
fn start_pod_server(flags: &Flags, address: &str, told: Server) -> Result<(), EntryError> {
    let server = Flags {
        socket: address.to_string(),
        action: String::new(),
        ..flags.clone()
    };
    let (child, out) = fork_server(move || {
        // SAFETY: single-threaded: nothing reads the environment meanwhile.
        unsafe {
            std::env::set_var(STARTED_AS_ENV, told.started_as);
            if let Some(p) = told.config_path {
                std::env::set_var(crate::config::ENV_PATH, p);
            }
        }
        *super::serve::HEAD_START
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = told.head_start;
        *super::serve::CGROUP_HEAD_START
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = told.cgroup_head;
        super::serve::hand_config(told.config);
        super::main_server(server)
    })?;
    await_listening(child, out, address.trim_start_matches("unix://"))
}

/// The forked server closes its stdout once it listens on `path` (or on
/// failure, after writing why).
pub(super) fn await_listening(child: Pid, out: File, path: &str) -> Result<(), EntryError> {
    let mut out = read_all(out);
    // The server writes only on failure, and listens before it closes the
    // pipe: check both, since it may not have exited yet when we get here.
    if out.is_empty() && UnixStream::connect(path).is_ok() {
        return Ok(());
    }
    let status = match waitpid(child, None) {
        Ok(WaitStatus::Exited(_, code)) => format!("exit status {code}"),
        Ok(WaitStatus::Signaled(_, sig, _)) => format!("killed by {sig}"),
        Ok(other) => format!("{other:?}"),
        Err(e) => e.to_string(),
    };
    out.truncate(out.trim_end().len());
    Err(EntryError::ServerFailed {
        status,
        output: out,
    })
}

/// Forks the server: the child is this process, binary already loaded and
/// relocated, so no second exec and dynamic link sits on the start path.
/// `start` has no thread yet, so the child may run anything. Its stdout is
/// the returned pipe; its stdin and stderr are /dev/null.
pub(super) fn fork_server(serve: impl FnOnce() -> i32) -> Result<(Pid, File), EntryError> {
    let spawn_err = |e: nix::Error| EntryError::Spawn(e.into());
    let (r, w) = pipe2(OFlag::O_CLOEXEC).map_err(spawn_err)?;
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(EntryError::Spawn)?;
    // SAFETY: this process is single-threaded here (no runtime has started),
    // so the child may allocate and run any code.
    match unsafe { fork() }.map_err(spawn_err)? {
        ForkResult::Parent { child } => {
            drop(w);
            Ok((child, File::from(r)))
        }
        ForkResult::Child => {
            drop(r);
            let code = match server_stdio(&null, &w) {
                Ok(()) => {
                    // Both were closed with every other fd above 2.
                    std::mem::forget(null);
                    std::mem::forget(w);
                    serve()
                }
                Err(e) => {
                    let _ = nix::unistd::write(&w, format!("server set-up: {e}").as_bytes());
                    1
                }
            };
            std::process::exit(code);
        }
    }
}

/// The server's session and stdio: its own session (containerd's signals do
/// not reach it), stdin and stderr /dev/null, stdout the pipe `start` reads,
/// and no other fd of `start`'s.
fn server_stdio(null: &File, out: &OwnedFd) -> nix::Result<()> {
    setsid()?;
    for (from, to) in [
        (null.as_raw_fd(), 0),
        (out.as_raw_fd(), 1),
        (null.as_raw_fd(), 2),
    ] {
        // SAFETY: dup2 onto a standard fd number; `from` is open and owned above.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(nix::Error::last());
        }
    }
    // SAFETY: close_range only closes fds; the ones above 2 are copies made
    // for this set-up or inherited from containerd, and none is used later.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if r != 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

fn read_all(mut f: File) -> String {
    let mut out = String::new();
    let _ = f.read_to_string(&mut out);
    out
}

fn write_address(bundle: &Path, address: &str) -> Result<(), EntryError> {
    std::fs::write(bundle.join("address"), address).map_err(EntryError::AddressFile)
}

/// `ConfigPath` of the runtime options containerd wrote on stdin, if any.
fn config_path_from_stdin() -> Option<String> {
    if nix::unistd::isatty(std::io::stdin()).unwrap_or(false) {
        return None;
    }
    let mut buf = Vec::new();
    std::io::stdin().take(1 << 20).read_to_end(&mut buf).ok()?;
    options_config_path(&buf)
}

/// The `Any{type_url, value}` of the runtime options, then its ConfigPath.
fn options_config_path(buf: &[u8]) -> Option<String> {
    let mut any = containerd_shim_protos::protobuf::well_known_types::any::Any::default();
    crate::protowire::fields("runtime options", buf, |n, v| {
        match n {
            1 => any.type_url = v.string("runtime options")?,
            2 => any.value = v.bytes("runtime options")?.to_vec(),
            _ => {}
        }
        Ok(())
    })
    .ok()?;
    crate::task::config_path(Some(&any)).ok().flatten()
}

#[cfg(test)]
mod options_tests {
    #[test]
    fn the_config_path_is_read_from_the_options_any() {
        let opts = crate::protowire::encode::msg(|o| {
            o.write_string(2, "/etc/rund/other.toml").unwrap();
        });
        let any = crate::protowire::encode::msg(|o| {
            o.write_string(1, "runtimeoptions.v1.Options").unwrap();
            o.write_bytes(2, &opts).unwrap();
        });
        assert_eq!(
            super::options_config_path(&any).as_deref(),
            Some("/etc/rund/other.toml")
        );
        assert_eq!(super::options_config_path(b""), None);
        assert_eq!(super::options_config_path(b"\xff\xff"), None);
    }
}
