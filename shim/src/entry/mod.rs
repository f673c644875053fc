//! The shim binary's entry: containerd runs it as `start`, `delete`, or
//! (from `start`) as the long-running server.

mod activity;
pub mod bootstrap;
pub mod delete;
pub mod error;
pub mod flags;
pub mod info;
pub mod node;
pub mod serve;
pub mod start;

use flags::Flags;

pub fn main() -> i32 {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let flags = match flags::parse(&args[1..]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("containerd-shim-rund-v2: {e}");
            return 1;
        }
    };
    if flags.version || args.iter().any(|a| a == "--version" || a == "-v") {
        println!("containerd-shim-rund-v2 {}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    if flags.info {
        return match info::run() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("containerd-shim-rund-v2: -info: {e}");
                1
            }
        };
    }
    if flags.action.is_empty() {
        return main_server(flags);
    }
    set_subreaper();
    let result = match flags.action.as_str() {
        "start" => start::run(&flags),
        "delete" => delete::run(&flags),
        other => Err(error::EntryError::UnknownAction(other.to_string())),
    };
    exit_code(result)
}

/// The long-running server: run directly (tests, an older `start`) or
/// forked by `start`.
pub fn main_server(flags: Flags) -> i32 {
    set_subreaper();
    exit_code(serve::run(flags))
}

/// The agent and our children are reparented to us, so we can reap them.
/// Not inherited across fork: the server sets it for itself.
pub(super) fn set_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

fn exit_code(result: Result<(), error::EntryError>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("containerd-shim-rund-v2: {e}");
            1
        }
    }
}

/// The shim's ttrpc address for a grouping id (one shim per pod).
pub fn socket_address(flags: &Flags, grouping: &str) -> String {
    flags::socket_address(&flags.address, &flags.namespace, grouping)
}
