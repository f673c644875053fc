//! `start`: print the address of the shim serving this container's pod,
//! starting one if none serves it yet. stdout and stderr both reach
//! containerd as the address: print nothing else.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use containerd_shim::Flags;

pub fn run(flags: &Flags) -> Result<(), String> {
    let bundle = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    let grouping = match crate::spec::load(&bundle) {
        Ok(spec) => crate::spec::grouping_id(&spec, &flags.id),
        Err(_) => flags.id.clone(), // Create reports a bad config.json properly.
    };
    record_config(&bundle);
    let address = super::socket_address(flags, &grouping);
    let path = address.trim_start_matches("unix://").to_string();
    if UnixStream::connect(&path).is_ok() {
        write_address(&bundle, &address)?;
        print!("{address}");
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "-namespace",
        &flags.namespace,
        "-id",
        &flags.id,
        "-address",
        &flags.address,
        "-socket",
        &address,
    ])
    .current_dir(&bundle)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if !flags.publish_binary.is_empty() {
        cmd.args(["-publish-binary", &flags.publish_binary]);
    }
    if flags.debug {
        cmd.arg("-debug");
    }
    // SAFETY: setsid is async-signal-safe; it detaches the server from
    // containerd's session so containerd's signals do not reach it.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn shim server: {e}"))?;
    // The server closes its stdout once it listens (or on failure).
    let mut out = String::new();
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_string(&mut out);
    }
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!(
            "shim server exited early ({status}): {}",
            out.trim()
        ));
    }
    write_address(&bundle, &address)?;
    std::io::stdout()
        .write_all(address.as_bytes())
        .and_then(|_| std::io::stdout().flush())
        .map_err(|e| format!("write address: {e}"))?;
    Ok(())
}

fn write_address(bundle: &Path, address: &str) -> Result<(), String> {
    std::fs::write(bundle.join("address"), address).map_err(|e| format!("write address file: {e}"))
}

/// containerd writes the task's runtime options to `start`'s stdin: record
/// the config path they name, for `delete` (which gets no options).
fn record_config(bundle: &Path) {
    use containerd_shim_protos::protobuf::well_known_types::any::Any;
    use containerd_shim_protos::protobuf::Message;
    if nix::unistd::isatty(std::io::stdin()).unwrap_or(false) {
        return;
    }
    let mut raw = Vec::new();
    if std::io::stdin().read_to_end(&mut raw).is_err() || raw.is_empty() {
        return;
    }
    let Ok(any) = Any::parse_from_bytes(&raw) else {
        return;
    };
    if let Ok(Some(path)) = crate::task::options::config_path(Some(&any)) {
        let _ = super::record::config_path(bundle, &path);
    }
}
