//! The command line containerd gives a v2 shim (`shim.go`'s flags), parsed
//! with Go's `flag` rules: `-name value`, `-name=value`, one or two dashes,
//! booleans bare or `=true|false`, parsing stops at the first non-flag
//! (the action) or `--`. An unknown flag is an error, as in Go.

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagError {
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    #[error("invalid boolean value {value:?} for -{name}")]
    BadBool { name: String, value: String },
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Flags {
    pub debug: bool,
    /// containerd's namespace owning the shim.
    pub namespace: String,
    pub id: String,
    /// The socket to serve (given to the server `start` spawns).
    pub socket: String,
    pub bundle: String,
    /// containerd's ttrpc address, for events.
    pub address: String,
    pub publish_binary: String,
    /// `start`, `delete`, or empty for the server.
    pub action: String,
    pub version: bool,
    /// Print the runtime info protobuf and exit.
    pub info: bool,
}

pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Flags, FlagError> {
    let mut f = Flags::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        let Some(body) = arg.strip_prefix('-').filter(|b| !b.is_empty()) else {
            break;
        };
        i += 1;
        let body = body.strip_prefix('-').unwrap_or(body);
        if body.is_empty() {
            break; // `--`: the flags end here.
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let boolean = match name {
            "debug" => Some(&mut f.debug),
            "v" | "version" => Some(&mut f.version),
            "info" => Some(&mut f.info),
            _ => None,
        };
        if let Some(slot) = boolean {
            *slot = match inline {
                None => true,
                Some(v) => go_bool(v).ok_or_else(|| FlagError::BadBool {
                    name: name.into(),
                    value: v.into(),
                })?,
            };
            continue;
        }
        let slot = match name {
            "namespace" => &mut f.namespace,
            "id" => &mut f.id,
            "socket" => &mut f.socket,
            "bundle" => &mut f.bundle,
            "address" => &mut f.address,
            "publish-binary" => &mut f.publish_binary,
            _ => return Err(FlagError::Unknown(name.into())),
        };
        *slot = match inline {
            Some(v) => v.to_string(),
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| FlagError::MissingValue(name.into()))?;
                i += 1;
                v.as_ref().to_string()
            }
        };
    }
    if let Some(action) = args.get(i) {
        f.action = action.as_ref().to_string();
    }
    Ok(f)
}

/// Go's `strconv.ParseBool`.
fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// containerd's `shim.SocketAddress`: a socket under `/run/containerd/s/`
/// named by the sha256 of `<address>/<namespace>/<id>`.
pub fn socket_address(address: &str, namespace: &str, id: &str) -> String {
    let path = format!("{address}/{namespace}/{id}");
    let hash = Sha256::digest(path.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("unix:///run/containerd/s/{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_start_line() {
        let f = parse(&[
            "-namespace",
            "k8s.io",
            "-address",
            "/run/containerd/containerd.sock",
            "-publish-binary",
            "/usr/bin/containerd",
            "-id",
            "abc",
            "-debug",
            "start",
        ])
        .unwrap();
        assert_eq!(
            f,
            Flags {
                debug: true,
                namespace: "k8s.io".into(),
                id: "abc".into(),
                address: "/run/containerd/containerd.sock".into(),
                publish_binary: "/usr/bin/containerd".into(),
                action: "start".into(),
                ..Flags::default()
            }
        );
    }

    #[test]
    fn go_flag_forms() {
        let f = parse(&["--id=x", "-bundle", "/b", "-debug=false", "-v", "delete"]).unwrap();
        assert_eq!((f.id.as_str(), f.bundle.as_str()), ("x", "/b"));
        assert!(!f.debug && f.version);
        assert_eq!(f.action, "delete");
        // `--` ends the flags; what follows is the action even if it looks like a flag.
        assert_eq!(parse(&["--", "-id"]).unwrap().action, "-id");
        assert_eq!(parse::<&str>(&[]).unwrap(), Flags::default());
        assert!(parse(&["-info"]).unwrap().info);
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            parse(&["-nope", "x"]),
            Err(FlagError::Unknown("nope".into()))
        );
        assert_eq!(parse(&["-id"]), Err(FlagError::MissingValue("id".into())));
        assert!(matches!(
            parse(&["-debug=yes"]),
            Err(FlagError::BadBool { .. })
        ));
    }

    #[test]
    fn socket_address_is_containerds() {
        // `printf %s /run/containerd/containerd.sock/default/pod1 | sha256sum`
        assert_eq!(
            socket_address("/run/containerd/containerd.sock", "default", "pod1"),
            "unix:///run/containerd/s/\
             d7ddcf8855c574bb9f6303100a7919bd8f9f6e011c611945861f6fa26dc0c66d"
        );
    }
}
