//! rund-agent: PID 1 of a rund sandbox. Started by the shim as
//! `rund-agent launch` (see `rund_proto::launch`).

mod container;
mod launch;
mod log;
mod process;
mod reaper;
mod sandbox;
mod server;
mod sys;

fn main() {
    // Exec'd through /proc/self/fd/N (a read-only mount of the binary):
    // give the process its real name back for ps and the shim's checks.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"rund-agent".as_ptr(), 0, 0, 0) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("launch") => launch::run(),
        Some("--version") => println!("rund-agent {}", env!("CARGO_PKG_VERSION")),
        _ => {
            eprintln!("usage: rund-agent launch   (started by containerd-shim-rund-v2 with fds 3, 4 and 5)");
            std::process::exit(2);
        }
    }
}
