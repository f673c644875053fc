//! `start`: print the address of the shim serving this container's pod,
//! starting one if none serves it yet, as a plain address or as containerd
//! 2.x's JSON bootstrap params (see [`super::bootstrap`]). stdout and stderr
//! both reach containerd as the reply: print nothing else.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::flags::Flags;

use super::bootstrap;
use super::error::EntryError;

/// Tells the server which reply `start` gave, for its log.
pub const STARTED_AS_ENV: &str = "RUND_SHIM_STARTED_AS";

pub fn run(flags: &Flags) -> Result<(), EntryError> {
    let bundle = std::env::current_dir().map_err(EntryError::Cwd)?;
    let grouping = match crate::spec::load(&bundle) {
        Ok(spec) => crate::spec::grouping_id(&spec, &flags.id),
        Err(_) => flags.id.clone(), // Create reports a bad config.json properly.
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
    if UnixStream::connect(&path).is_ok() {
        write_address(&bundle, &address)?;
        print!("{}", reply.render(&address));
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(EntryError::CurrentExe)?;
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
    .env(STARTED_AS_ENV, reply.name())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if !flags.publish_binary.is_empty() {
        cmd.args(["-publish-binary", &flags.publish_binary]);
    }
    if let Some(path) = config_path {
        cmd.env(crate::config::ENV_PATH, path);
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
    let mut child = cmd.spawn().map_err(EntryError::Spawn)?;
    // The server closes its stdout once it listens (or on failure).
    let mut out = String::new();
    if let Some(mut so) = child.stdout.take() {
        let _ = so.read_to_string(&mut out);
    }
    // The server writes only on failure, and listens before it closes the
    // pipe: check both, since it may not have exited yet when we get here.
    if !out.is_empty() || UnixStream::connect(&path).is_err() {
        let status = child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        return Err(EntryError::ServerFailed {
            status,
            output: out.trim().to_string(),
        });
    }
    write_address(&bundle, &address)?;
    std::io::stdout()
        .write_all(reply.render(&address).as_bytes())
        .and_then(|_| std::io::stdout().flush())
        .map_err(EntryError::WriteAddress)?;
    Ok(())
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
