//! containerd-shim-rundbench-noop-v2: the bench's floor. A shim v2 that
//! starts no process: Create opens the stdio FIFOs and reports its own pid,
//! Start "runs" the task, which exits at once when its argv is `/bin/true`
//! and otherwise when it is killed. Events are published as a real shim
//! would. What remains of a `ctr run` is containerd's and ctr's own work
//! plus one shim process start: the time no runtime can save.

mod task;

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use containerd_shim::publisher::RemotePublisher;
use containerd_shim::Flags;
use containerd_shim_protos::api::DeleteResponse;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::shim_async::create_task;
use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use containerd_shim_protos::ttrpc::r#async::Server;

fn main() {
    let args: Vec<_> = std::env::args_os().collect();
    let r = containerd_shim::parse(&args[1..])
        .map_err(|e| e.to_string())
        .and_then(|flags| match flags.action.as_str() {
            "start" => start(&flags),
            "delete" => delete(),
            "" => serve(flags),
            other => Err(format!("unknown action {other:?}")),
        });
    if let Err(e) = r {
        eprintln!("noop shim: {e}");
        std::process::exit(1);
    }
}

/// Spawns the server (one per container) and prints its address once it listens.
fn start(flags: &Flags) -> Result<(), String> {
    let address = containerd_shim::socket_address(&flags.address, &flags.namespace, &flags.id);
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["-namespace", &flags.namespace, "-id", &flags.id])
        .args(["-address", &flags.address, "-socket", &address])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; containerd's signals must not reach the server.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn server: {e}"))?;
    // The server closes its stdout once it listens.
    let mut out = String::new();
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_string(&mut out);
    }
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("server exited early ({status}): {}", out.trim()));
    }
    std::fs::write("address", &address).map_err(|e| format!("write address: {e}"))?;
    print!("{address}");
    std::io::stdout().flush().map_err(|e| e.to_string())
}

/// containerd's clean-up after the connection closes: nothing to undo.
fn delete() -> Result<(), String> {
    let resp = DeleteResponse {
        exit_status: 137,
        ..Default::default()
    };
    let bytes = resp.write_to_bytes().map_err(|e| e.to_string())?;
    std::io::stdout()
        .write_all(&bytes)
        .map_err(|e| e.to_string())
}

fn serve(flags: Flags) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(async move {
        let path = flags.socket.trim_start_matches("unix://").to_string();
        let publisher = match std::env::var("TTRPC_ADDRESS") {
            Ok(a) if !a.is_empty() => Some(
                RemotePublisher::new(&a)
                    .await
                    .map_err(|e| format!("publisher: {e}"))?,
            ),
            _ => None,
        };
        let svc = Arc::new(task::Noop::new(publisher, flags.namespace.clone()));
        if let Some(dir) = std::path::Path::new(&path).parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir: {e}"))?;
        }
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).map_err(|e| format!("bind {path}: {e}"))?;
        let l = Listener::try_from(l).map_err(|e| format!("listener: {e}"))?;
        let mut server = Server::new()
            .add_listener(l)
            .register_service(create_task(svc.clone()));
        server.start().await.map_err(|e| format!("ttrpc: {e}"))?;
        // Tell `start` we listen: point stdout (its pipe) at stderr (/dev/null).
        // SAFETY: dup2 onto fd 1; both fds stay valid for the process lifetime.
        unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
        svc.shutdown.notified().await;
        // Let the Shutdown reply go out before the server stops.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let _ = server.shutdown().await;
        let _ = std::fs::remove_file(&path);
        Ok(())
    })
}
